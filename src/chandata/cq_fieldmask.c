/* cq_fieldmask.c - FieldMask filtering on wire bytes (see cq_fieldmask.h).
 *
 * Each level walks the message's fields once. For a field, the active paths either name it
 * whole (copy it verbatim), continue below it (the suffixes become the active paths of the
 * sub-message, of every element, or of every map value) or do not mention it (drop it).
 */
#include "cq_fieldmask.h"

#include "cq_alloc.h"
#include "cq_err.h"
#include "cq_merge.h"

#include <errno.h>
#include <string.h>

enum { MATCH_NONE, MATCH_WHOLE, MATCH_SUB };

static int filter_level(const cq_msgdesc_t *d, const char *const *paths, size_t np,
                        const uint8_t *p, size_t n, int depth, cq_sbuf_t *out);

static const char *skip_dots(const char *s)
{
    while (*s == '.')
        s++;
    return s;
}

/* Does path s name the field called name? MATCH_SUB sets *rest to the remaining path. */
static int match(const char *s, const char *name, const char **rest)
{
    s = skip_dots(s);
    size_t len = strlen(name);
    if (strncmp(s, name, len) != 0 || (s[len] != '\0' && s[len] != '.'))
        return MATCH_NONE;
    const char *t = skip_dots(s + len);
    if (*t == '\0')
        return MATCH_WHOLE; /* "a" or "a." */
    *rest = t;
    return MATCH_SUB;
}

/* Collects into sub[] the suffixes of the paths continuing below f; *whole when one names f. */
static size_t sub_paths(const cq_fielddesc_t *f, const char *const *paths, size_t np,
                        const char **sub, bool *whole)
{
    size_t ns = 0;
    *whole = false;
    for (size_t i = 0; i < np; i++) {
        const char *rest = NULL;
        int m = paths[i] ? match(paths[i], f->name, &rest) : MATCH_NONE;
        if (m == MATCH_WHOLE)
            *whole = true;
        else if (m == MATCH_SUB)
            sub[ns++] = rest;
    }
    return ns;
}

/* tag, then the filtered sub-message as the body. */
static int filter_len(uint32_t number, const cq_msgdesc_t *d, const char *const *sub, size_t ns,
                      const uint8_t *p, size_t n, int depth, cq_sbuf_t *out)
{
    size_t off;
    int r = cq__merge_put_tag(out, number, 2);
    if (r < 0 || (r = cq__merge_begin_len(out, &off)) < 0)
        return r;
    if ((r = filter_level(d, sub, ns, p, n, depth + 1, out)) < 0)
        return r;
    return cq__merge_end_len(out, off);
}

/* One map entry: the key is kept, the message value filtered, anything else dropped. */
static int filter_entry(const cq_fielddesc_t *f, const char *const *sub, size_t ns,
                        const cq__wfield_t *e, int depth, cq_sbuf_t *out)
{
    const cq_msgdesc_t *ed = f->msg;
    if (ed->map_value->kind != CQ_FK_MESSAGE)
        return cq_sbuf_append(out, e->start, (size_t)(e->end - e->start));
    if (depth + 1 > CQ_MERGE_MAX_DEPTH)
        return CQ_EDECODE;
    size_t off;
    int r = cq__merge_put_tag(out, f->number, 2);
    if (r < 0 || (r = cq__merge_begin_len(out, &off)) < 0)
        return r;
    const uint8_t *p = e->pay, *end = e->pay + e->pay_len;
    while (p < end) {
        cq__wfield_t w;
        if ((r = cq__merge_read_field(&p, end, depth + 1, &w)) < 0)
            return r;
        if (w.number == ed->map_key->number && cq__merge_wt_ok(ed->map_key, w.wt))
            r = cq_sbuf_append(out, w.start, (size_t)(w.end - w.start));
        else if (w.number == ed->map_value->number && w.wt == 2)
            r = filter_len(w.number, ed->map_value->msg, sub, ns, w.pay, w.pay_len, depth + 1, out);
        if (r < 0)
            return r;
    }
    return cq__merge_end_len(out, off);
}

static int filter_field(const cq_fielddesc_t *f, const char *const *paths, size_t np,
                        const char **sub, const cq__wfield_t *w, int depth, cq_sbuf_t *out)
{
    bool whole;
    size_t ns = sub_paths(f, paths, np, sub, &whole);
    if (whole || (ns && f->kind != CQ_FK_MESSAGE))
        return cq_sbuf_append(out, w->start, (size_t)(w->end - w->start));
    if (!ns)
        return 0;
    if (f->is_map)
        return filter_entry(f, sub, ns, w, depth, out);
    return filter_len(f->number, f->msg, sub, ns, w->pay, w->pay_len, depth, out);
}

static int filter_level(const cq_msgdesc_t *d, const char *const *paths, size_t np,
                        const uint8_t *p, size_t n, int depth, cq_sbuf_t *out)
{
    if (depth > CQ_MERGE_MAX_DEPTH)
        return CQ_EDECODE;
    const char **sub = cq_malloc(np * sizeof(*sub));
    if (!sub)
        return -ENOMEM;
    const uint8_t *end = p + n;
    int r = 0;
    while (p < end && r == 0) {
        cq__wfield_t w;
        if ((r = cq__merge_read_field(&p, end, depth, &w)) < 0)
            break;
        const cq_fielddesc_t *f = cq_msgdesc_field(d, w.number);
        if (f && cq__merge_wt_ok(f, w.wt))
            r = filter_field(f, paths, np, sub, &w, depth, out);
    }
    cq_free(sub);
    return r;
}

int cq_fieldmask_filter(const cq_msgdesc_t *d, const char *const *paths, size_t n_paths,
                        const uint8_t *p, size_t n, cq_sbuf_t *out)
{
    if (!n_paths || !n)
        return cq_sbuf_append(out, p, n);
    size_t mark = out->len;
    int r = filter_level(d, paths, n_paths, p, n, 0, out);
    if (r < 0)
        out->len = mark;
    return r;
}
