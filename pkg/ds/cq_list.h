/* cq_list.h - intrusive circular doubly linked list (libuv queue.h style).
 *
 * The node is embedded in the owner; cq_container_of() gets the owner back. No allocation.
 * An initialised but unlinked node points to itself, so cq_list_remove() is idempotent.
 */
#ifndef CQ_LIST_H
#define CQ_LIST_H

#include <stdbool.h>

typedef struct cq_list {
    struct cq_list *next, *prev;
} cq_list_t;

static inline void cq_list_init(cq_list_t *l)
{
    l->next = l->prev = l;
}

static inline bool cq_list_empty(const cq_list_t *l)
{
    return l->next == l;
}

static inline void cq_list_insert_tail(cq_list_t *head, cq_list_t *n)
{
    n->prev = head->prev;
    n->next = head;
    head->prev->next = n;
    head->prev = n;
}

static inline void cq_list_insert_head(cq_list_t *head, cq_list_t *n)
{
    n->next = head->next;
    n->prev = head;
    head->next->prev = n;
    head->next = n;
}

static inline void cq_list_remove(cq_list_t *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->next = n->prev = n;
}

#define cq_list_foreach(pos, head) for ((pos) = (head)->next; (pos) != (head); (pos) = (pos)->next)
#define cq_list_foreach_safe(pos, tmp, head)                                                       \
    for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head);                               \
         (pos) = (tmp), (tmp) = (pos)->next)

#endif
