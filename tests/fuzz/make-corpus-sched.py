#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_sched (tests/fuzz/corpus/fuzz_sched/); idempotent.

A seed is a script for the target (see the comment at the top of fuzz_sched.c and its step()):
a 3-byte header (tick, overload policy, quantum; start time / 8; buffer limit or 255), then
steps of one op byte (low 4 bits the op, high 4 bits its argument) and the op's own bytes.
The seeds walk the main paths: the design note's timeline, folding down to a resync with a
4-entry buffer, overload levels on aligned near/mid/far windows with a quantum, resync and new
intervals, tick_max budgets, skip_self and masks, clock jumps and injected failures."""
import os
import random

# header byte 0: ticks[b & 7] = 0, 1, 5, 10, 20, 3, 7, 50; bit 3 overload policy; bit 4 quantum
TICK10, TICK5, TICK1 = 3, 2, 1
COARSEN, QUANTUM = 8, 16
# interval_of(b): table index for b < 16, the raw value for bits 0x10 set
IV = {0: 0, 1: 1, 2: 2, 5: 3, 10: 4, 15: 5, 20: 6, 30: 7, 50: 8, 64: 9, 99: 10, 100: 11, 150: 12,
      250: 13, 1000: 14, 1500: 15}
SET_ALL = 0x3f
SKIP_SELF, SKIP_FIRST = 0x40, 0x80


def op(code, arg=0):
    return bytes([(arg << 4) | code])


def conn(c):
    return c - 1  # argument of the conn ops: id = arg + 1


def sub(c, interval, delay=0, skip_self=False, skip_first=False, masks=0, align=False,
        set_=SET_ALL, defaults=False):
    f1 = set_ | (SKIP_SELF if skip_self else 0) | (SKIP_FIRST if skip_first else 0)
    f2 = (1 if align else 0) | (masks << 1) | (0x80 if defaults else 0)
    return op(0, conn(c)) + bytes([f1, f2, IV[interval], (delay // 3) & 0xff])


def resub(c, interval): return op(1, conn(c)) + bytes([IV[interval]])
def unsub(c): return op(2, conn(c))
def upd(sender=0): return op(3, sender)
def burst(n, first_sender=0): return op(4, n - 1) + bytes([first_sender])
def tick(): return op(5)
def tick_max(budget): return op(6, budget - 1)
def resync(c): return op(7, conn(c))
def level(n): return op(8, n)
def quantum(on): return op(9, 1 if on else 0)
def step(ms): return op(10, ms)  # 0..15
def wait(ms): return op(11) + bytes([ms])  # 0..255
def jump(k): return op(12) + bytes([k])  # (k + 1) * 997 ms
def fail(kind, n=1): return op(13, (n - 1) * 3 + kind)  # kind 0 merge, 1 full, 2 filter
def buf_max(b): return op(14) + bytes([b])  # a limit of b * 17
def step_tick(ms): return op(15, ms)


def header(b0, start=125, buf=255):
    return bytes([b0, start, buf])


def every(ms, n, body=b''):
    return (body + wait(ms) + tick()) * n


seeds = {}
# The design note's timeline: C0 sends U1, U2, U3; C1 every 50 with skip_first, C2 every 100
# with delay -50.
seeds['timeline'] = (header(TICK10) + sub(1, 50, skip_first=True) + sub(2, 100, delay=-51) +
                     every(10, 6) + upd(3) + every(10, 6) + upd(3) + every(10, 12) + upd(3) +
                     every(10, 6))
# A 4-entry buffer, long windows started between updates: folding, then the oldest two folded
# and a subscriber resynchronised.
seeds['fold_resync'] = (header(TICK1, buf=0) + sub(1, 1000, skip_first=True) + step(1) + upd(8) +
                        step(1) + sub(2, 1000, skip_first=True) + step(1) + upd(8) + step(1) +
                        sub(3, 1000, skip_first=True) + step(1) + upd(8) + step(1) +
                        sub(4, 1000, skip_first=True) + step(1) + upd(8) + step(1) + upd(8) +
                        burst(12, 1) + jump(0) + tick() + step_tick(2) + step_tick(2))
seeds['fold_bursts'] = (header(TICK5, buf=8) + sub(1, 20) + sub(2, 1000) + sub(3, 150, delay=-30) +
                        every(7, 40, burst(5, 0)) + jump(3) + tick())
# Overload: aligned near, mid and far windows, the level moving, a 20 ms quantum.
seeds['coarsen'] = (header(TICK10 | COARSEN | QUANTUM) + sub(1, 20, align=True) +
                    sub(2, 50, align=True) + sub(3, 100, align=True) + sub(4, 1000, align=True) +
                    every(10, 10, upd(0)) + level(2) + every(10, 30, upd(0)) + level(4) +
                    every(35, 20, upd(0)) + level(1) + wait(250) + tick() + level(0) +
                    every(10, 10, upd(0)))
seeds['coarsen_late'] = (header(TICK5 | COARSEN, buf=20) + sub(1, 10) + sub(2, 50) +
                         level(3) + every(3, 30, upd(0)) + wait(200) + tick() + level(1) +
                         every(40, 10, burst(3, 0)) + quantum(True) + sub(3, 20, align=True) +
                         every(9, 20, upd(0)))
# Resync, new intervals (aligned: realigned), unsub and sub again.
seeds['resync_resub'] = (header(TICK10) + sub(1, 20, align=True) + sub(2, 50) +
                         sub(3, 100, skip_first=True, align=True) +
                         every(10, 8, upd(0)) + resync(1) + resync(3) + every(10, 4, upd(0)) +
                         resub(1, 50) + resub(3, 20) + resub(2, 150) + every(10, 10, upd(0)) +
                         unsub(2) + upd(0) + sub(2, 20, delay=30) + every(10, 10, upd(0)))
# tick_max with budgets of 1 to 4 over 6 subscribers due together.
seeds['tick_max'] = (header(TICK10) + b''.join(sub(c, 50, align=True) for c in range(1, 7)) +
                     upd(0) + wait(50) + tick_max(1) + tick_max(2) + tick_max(4) +
                     b''.join(upd(0) + wait(50) + tick_max(b) for b in (3, 1, 2, 4, 1)) + tick())
# skip_self on and off, senders among the subscribers, masks 1 and 2.
seeds['skip_self_masks'] = (header(TICK5, buf=12) + sub(1, 20, skip_self=True, masks=1) +
                            sub(2, 20, skip_self=True, masks=2) + sub(3, 50, masks=1) +
                            sub(4, 30, skip_self=True) +
                            every(4, 40, upd(1) + upd(2) + upd(4) + upd(0)) +
                            sub(1, 20, skip_self=False, set_=0x04) + every(4, 10, upd(1)))
seeds['defaults'] = (header(TICK10) + sub(1, 0, defaults=True) + sub(2, 0, set_=0) +
                     every(5, 20, upd(1) + upd(2)))
# Clock jumps across many empty windows, negative delays and a start at time 0.
seeds['jumps'] = (header(TICK1, start=0) + sub(1, 1, delay=-300) + sub(2, 1500, delay=-99) +
                  sub(3, 64, skip_first=True, delay=-60) + upd(0) + jump(50) + upd(0) + tick() +
                  jump(255) + upd(0) + step_tick(1) + jump(3) + tick())
# Injected failures: merge while folding and in a window, full state, filter.
seeds['failures'] = (header(TICK5, buf=4) + sub(1, 100, masks=1) + sub(2, 1000, skip_first=True) +
                     every(5, 5, upd(0)) + fail(0, 2) + burst(6, 0) + fail(1) + wait(100) +
                     tick() + fail(2) + tick() + wait(5) + fail(0) + tick() +
                     every(50, 5, upd(0)) + buf_max(1) + buf_max(0) + buf_max(250))
# A merge failing while a full buffer is folded: the update is refused.
seeds['fold_fail'] = (header(TICK1, buf=0) + b''.join(
    sub(c, 1000, skip_first=True) + step(1) + upd(8) + step(1) for c in range(1, 5)) +
    fail(0, 3) + upd(8) + upd(8) + burst(6, 1) + jump(0) + tick())
# Sixteen aligned subscribers in one group, churned (unsub, sub again into the same group) until
# the group squeezes out its holes; then all due together under tick_max.
seeds['group_churn'] = (header(TICK10, start=100) +
                        b''.join(sub(c, 100, align=True) for c in range(1, 17)) + upd(0) +
                        b''.join(unsub(c) + sub(c, 100, align=True) for c in range(1, 11)) +
                        b''.join(unsub(c) for c in range(3, 14)) + upd(0) + wait(100) +
                        tick_max(3) + tick() + b''.join(sub(c, 100, align=True) for c in range(3, 14)) +
                        every(50, 4, upd(0)) + wait(100) + tick_max(4) + tick_max(4) + tick())
rng = random.Random(5)
for i in range(4):
    seeds['random%d' % i] = bytes(rng.randrange(256) for _ in range(300 + 100 * i))

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'corpus', 'fuzz_sched')
os.makedirs(out, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(out, name), 'wb') as f:
        f.write(data)
