"""The policy over a tree's processes (probes/sampling/tree_sampling.py), driven on constructed windows and signals
with a
simulated clock: alike workers take turns and each comes round within the bound, a worker or rank whose signals
move samples at once, agreeing ranks rest half the time and one that differs does not."""

from __future__ import annotations

import itertools

from probes.sampling.sampling_policy import PhaseChangeDetector, PhaseSignals
from probes.sampling.tree_sampling import (
    NODE_TURNS,
    POLL_S,
    TURN_REST_S,
    TURN_START_SLACK_S,
    TURN_WINDOW_S,
    TreeSamplingPolicy,
    rank_rest_windows,
)

RANK_A, RANK_B = 100, 200
WAITING = ("Queue.get", "queues.py")  # what idle workers show
SETTLED_WINDOW_S = 10.0


def simulate(policy: TreeSamplingPolicy, pids, seconds: float, *, picture=lambda pid, t: WAITING, step: float = 0.25,
             window_s=lambda pid: SETTLED_WINDOW_S, start_at: float = 0.0, on_tick=None):
    """Run each pid's record loop on a simulated clock: a window starts when wait_s says 0 and lasts its own
    length (capped by the policy); returns [(pid, start, end)] of every window."""
    windows, running = [], {}  # pid -> (start, end)
    now = start_at
    while now < start_at + seconds:
        if on_tick is not None:
            on_tick(now)
        for pid in pids:
            if pid in running and running[pid][1] <= now:
                start, end = running.pop(pid)
                windows.append((pid, start, end))
                policy.window_finished(pid, picture(pid, now), settled=True, now=now)
        for pid in pids:
            if pid not in running and policy.wait_s(pid, now) <= 0:
                turn = policy.turn_length_s(pid)
                length = window_s(pid) if turn is None else turn
                running[pid] = (now, now + length)
                policy.window_started(pid, now)
        now += step
    return windows


def workers_of(owner: int, n: int) -> list[int]:
    return [owner + 1 + i for i in range(n)]


def test_alike_workers_take_turns_and_each_comes_round_within_the_bound():
    workers = workers_of(RANK_A, 8)
    policy = TreeSamplingPolicy()
    policy.set_roles({RANK_A: ("rank", None), **{w: ("worker", RANK_A) for w in workers}})
    windows = simulate(policy, workers, 300.0)
    # First each worker is seen on its own (all at once), then they rotate.
    assert {pid for pid, start, _ in windows if start == 0.0} == set(workers)
    rotation = [(pid, start, end) for pid, start, end in windows if start > 0.0]
    assert rotation, "no window after the first look"
    # One at a time, each at most a turn long, with a rest between one's turn and the next.
    for i, (_, start, end) in enumerate(rotation):
        assert end - start <= TURN_WINDOW_S
        assert all(not (s < end and start < e) for _, s, e in rotation[:i]), "two alike workers sampled at once"
    assert all(later[1] - earlier[2] >= TURN_REST_S for earlier, later in itertools.pairwise(rotation))
    bound = policy.rotation_bound_s(RANK_A)
    assert bound == 8 * (TURN_WINDOW_S + TURN_START_SLACK_S + TURN_REST_S)
    for worker in workers:
        ends = [SETTLED_WINDOW_S] + [end for pid, _, end in rotation if pid == worker]
        starts = [start for pid, start, _ in rotation if pid == worker]
        assert len(starts) >= 300.0 // bound, worker
        # never longer than the bound between one window's end and the next one's start
        assert max(s - e for s, e in zip(starts, ends, strict=False)) <= bound, worker
    # the cost: about half of one worker's sampling instead of eight workers'
    sampled = sum(end - start for _, start, end in rotation)
    assert sampled <= 1.05 * (300.0 - SETTLED_WINDOW_S) * TURN_WINDOW_S / (TURN_WINDOW_S + TURN_REST_S)


def test_each_rank_rotates_its_own_workers():
    a, b = workers_of(RANK_A, 3), workers_of(RANK_B, 3)
    policy = TreeSamplingPolicy()
    policy.set_roles({**{w: ("worker", RANK_A) for w in a}, **{w: ("worker", RANK_B) for w in b}})
    windows = simulate(policy, a + b, 60.0)
    for group in (a, b):
        late = [(p, s, e) for p, s, e in windows if p in group and s > 0]
        assert {p for p, _, _ in late} == set(group)
        for i, (_, s, e) in enumerate(late):
            assert all(not (s2 < e and s < e2) for _, s2, e2 in late[:i])
    # the two ranks' turns overlap: one worker per rank at a time, not one per tree
    assert any(sa < eb and sb < ea for pa, sa, ea in windows if pa in a and sa > 0
               for pb, sb, eb in windows if pb in b and sb > 0)


def test_a_worker_that_differs_is_sampled_on_its_own():
    workers = workers_of(RANK_A, 4)
    odd = workers[2]
    policy = TreeSamplingPolicy()
    policy.set_roles({w: ("worker", RANK_A) for w in workers})
    picture = lambda pid, t: ("slow_augment", "dataset.py") if pid == odd else WAITING  # noqa: E731
    windows = simulate(policy, workers, 120.0, picture=picture)
    assert policy.rotating(RANK_A) == set(workers) - {odd}
    odd_windows = [(s, e) for p, s, e in windows if p == odd]
    # back to back, full length: never waits for a turn
    assert all(e - s == SETTLED_WINDOW_S for s, e in odd_windows)
    assert all(later[0] - earlier[1] <= 0.25 for earlier, later in itertools.pairwise(odd_windows))


def test_a_worker_whose_signals_move_is_sampled_at_once():
    workers = workers_of(RANK_A, 8)
    policy = TreeSamplingPolicy()
    policy.set_roles({w: ("worker", RANK_A) for w in workers})
    simulate(policy, workers, 40.0)  # rotating by now
    assert policy.rotating(RANK_A) == set(workers)
    waiting = next(w for w in workers if policy.wait_s(w, 40.0) > 0)
    policy.called_up([waiting], 40.0)
    assert policy.wait_s(waiting, 40.0) == 0 and policy.turn_length_s(waiting) is None
    assert waiting not in policy.rotating(RANK_A)
    # Until a window of its own started after the call has finished; then it rejoins the rotation.
    policy.window_started(waiting, 40.0)
    policy.window_finished(waiting, WAITING, settled=True, now=50.0)
    assert waiting in policy.rotating(RANK_A)


def test_agreeing_ranks_rest_half_the_time_and_one_that_differs_does_not():
    ranks = [RANK_A, RANK_B, 300, 400]
    policy = TreeSamplingPolicy()
    policy.set_roles({r: ("rank", None) for r in ranks})
    straggler = 400
    picture = lambda pid, t: ("slow_augment", "train.py") if pid == straggler else ("all_reduce", "c10d.py")  # noqa: E731
    windows = simulate(policy, ranks, 200.0, picture=picture)
    for rank in ranks:
        sampled = sum(e - s for p, s, e in windows if p == rank)
        if rank == straggler:
            assert sampled >= 0.95 * 200.0 - SETTLED_WINDOW_S, sampled
        else:
            assert 0.4 * 200.0 <= sampled <= 0.6 * 200.0, (rank, sampled)
            starts = [s for p, s, _ in windows if p == rank]
            # never unsampled longer than one window's rest (plus a poll)
            assert max(b - a for a, b in itertools.pairwise(starts)) <= 2 * SETTLED_WINDOW_S + POLL_S


def test_many_agreeing_ranks_keep_about_two_windows_running_and_each_comes_round():
    """A node's eight ranks in step: each rests three of its windows after one (rank_rest_windows), so about
    RANK_WINDOWS_AT_ONCE windows run at once on average instead of four (ranks that started together rest
    together: not spread out); none goes unsampled longer than its rest;
    the one that starts to differ samples all the time."""
    ranks = [100 * (i + 1) for i in range(8)]
    policy = TreeSamplingPolicy()
    policy.set_roles({r: ("rank", None) for r in ranks})
    straggler = ranks[-1]
    picture = lambda pid, t: ("slow_augment", "train.py") if pid == straggler and t > 200 else ("all_reduce", "c10d.py")  # noqa: E731
    windows = simulate(policy, ranks, 400.0, picture=picture)
    agreeing = ranks[:-1]
    assert rank_rest_windows(len(ranks)) == 3 and rank_rest_windows(7) == 3 and rank_rest_windows(4) == 1
    for rank in agreeing:
        starts = [s for p, s, _ in windows if p == rank]
        sampled = sum(e - s for p, s, e in windows if p == rank and s >= 50.0)
        assert 0.2 * 350.0 <= sampled <= 0.33 * 350.0, (rank, sampled)
        assert max(b - a for a, b in itertools.pairwise(starts)) <= 4 * SETTLED_WINDOW_S + POLL_S
    # after the first round, about two agreeing ranks' windows at a time on average (the straggler apart)
    busy = sum(e - s for p, s, e in windows if p in agreeing and 50.0 <= s < 200.0)
    assert busy <= 2.6 * 150.0, busy
    late = sum(e - s for p, s, e in windows if p == straggler and s >= 220.0)
    assert late >= 0.9 * (400.0 - 220.0) - SETTLED_WINDOW_S, late


def test_another_rank_shows_names_a_picture_other_ranks_share():
    policy = TreeSamplingPolicy()
    worker = RANK_A + 1
    policy.set_roles({RANK_A: ("rank", None), RANK_B: ("rank", None), worker: ("worker", RANK_A)})
    forward, reduce = ("forward", "model.py"), ("all_reduce", "c10d.py")
    assert not policy.another_rank_shows(RANK_A, reduce)  # rank B has no window yet
    policy.window_started(RANK_B, 0.0)
    policy.window_finished(RANK_B, reduce, settled=True, now=10.0)
    policy.window_started(worker, 0.0)
    policy.window_finished(worker, forward, settled=True, now=10.0)
    assert policy.another_rank_shows(RANK_A, reduce)
    assert not policy.another_rank_shows(RANK_A, forward)  # only a worker shows it
    assert not policy.another_rank_shows(RANK_B, reduce)  # its own picture is not another rank's
    assert not policy.another_rank_shows(worker, reduce)  # not a rank
    assert not policy.another_rank_shows(RANK_A, None)


def test_a_resting_rank_whose_signals_move_samples_at_once_and_still_dumps():
    policy = TreeSamplingPolicy()
    policy.set_roles({RANK_A: ("rank", None), RANK_B: ("rank", None)})
    for rank in (RANK_A, RANK_B):
        policy.window_started(rank, 0.0)
        policy.window_finished(rank, ("all_reduce", "c10d.py"), settled=True, now=10.0)
    assert policy.wait_s(RANK_A, 12.0) > 0  # resting: it agrees with rank B
    assert policy.wait_s(RANK_A, 12.0, dump=True) == 0  # a dump (its current stack) is not held back
    policy.called_up([RANK_A], 12.0)
    assert policy.wait_s(RANK_A, 12.0) == 0


def test_without_roles_everyone_samples_as_before():
    policy = TreeSamplingPolicy()
    policy.set_roles({1: None, 2: None})
    windows = simulate(policy, [1, 2], 50.0)
    for pid in (1, 2):
        assert sum(e - s for p, s, e in windows if p == pid) >= 40.0
        assert policy.turn_length_s(pid) is None


def test_the_detector_names_every_process_that_moved():
    detector = PhaseChangeDetector()
    steady = {pid: PhaseSignals(cpu_pct=90.0, main_thread_cpu_pct=90.0) for pid in (1, 2, 3)}
    for t in range(8):
        assert detector.observe(float(t), steady) is None
        assert detector.moved_pids == frozenset()
    moved = dict(steady)
    moved[1] = moved[3] = PhaseSignals(cpu_pct=5.0, main_thread_cpu_pct=5.0)
    assert detector.observe(8.0, moved).startswith("PID 1:")
    assert detector.moved_pids == {1, 3}
    assert detector.observe(9.0, {**moved, 4: PhaseSignals(cpu_pct=1.0)}) is not None
    assert detector.moved_pids == {4}  # a process that started is called up too


def test_a_wake_wakes_only_the_ranks_and_workers_that_moved():
    """Ranks in step that change phase each move by themselves; a rank whose own signals hold is spared a wake (it
    stays at its settled rate), and so is the launcher when only ranks and workers moved. A lone process that
    moved wakes everyone."""
    launcher, lone = 50, 60
    workers = workers_of(RANK_A, 2)
    policy = TreeSamplingPolicy()
    policy.set_roles({launcher: None, RANK_A: ("rank", None), RANK_B: ("rank", None),
                      **{w: ("worker", RANK_A) for w in workers}})
    assert policy.spared_by_wake({RANK_B}) == {launcher, RANK_A, *workers}
    assert policy.spared_by_wake({RANK_A, RANK_B}) == {launcher, *workers}
    assert policy.spared_by_wake({workers[0]}) == {launcher, RANK_A, RANK_B, workers[1]}
    policy.set_roles({lone: None, RANK_A: ("rank", None), RANK_B: ("rank", None)})
    assert policy.spared_by_wake({lone}) == {RANK_A, RANK_B}  # ranks that did not move: still spared
    assert policy.spared_by_wake({lone, RANK_A}) == {RANK_B}


def test_alike_workers_of_many_ranks_share_the_trees_turns():
    """Eight ranks' alike workers: at most NODE_TURNS turns at once over the tree (not one per rank), every rank's
    workers still come round (first come, first served), each worker within the bound."""
    owners = [1000 * (i + 1) for i in range(8)]
    groups = {owner: workers_of(owner, 8) for owner in owners}
    pids = [w for ws in groups.values() for w in ws]
    policy = TreeSamplingPolicy()
    policy.set_roles({**{o: ("rank", None) for o in owners},
                      **{w: ("worker", o) for o, ws in groups.items() for w in ws}})
    windows = simulate(policy, pids, 600.0)
    rotation = [(pid, start, end) for pid, start, end in windows if start > 0.0]
    # never more than NODE_TURNS at once, and the cap is used (two at once at some point)
    edges = sorted([(s, 1) for _, s, _ in rotation] + [(e, -1) for _, _, e in rotation])
    running = peak = 0
    for _, change in edges:
        running += change
        peak = max(peak, running)
    assert peak == NODE_TURNS
    bound = policy.rotation_bound_s(owners[0])
    assert bound == 8 * 4 * (TURN_WINDOW_S + TURN_START_SLACK_S)  # 8 workers x ceil(8 owners / 2) turns each
    for owner, workers in groups.items():
        for worker in workers:
            starts = [s for p, s, _ in rotation if p == worker]
            ends = [SETTLED_WINDOW_S] + [e for p, _, e in rotation if p == worker]
            assert starts, (owner, worker)
            assert max(s - e for s, e in zip(starts, ends, strict=False)) <= bound, (owner, worker)
    # the cost: at most NODE_TURNS workers sampling at a time, against one per rank (eight) before
    sampled = sum(end - start for _, start, end in rotation)
    assert sampled <= NODE_TURNS * (600.0 - SETTLED_WINDOW_S)
    assert sampled < 0.5 * 8 * (600.0 - SETTLED_WINDOW_S) * TURN_WINDOW_S / (TURN_WINDOW_S + TURN_REST_S)


def test_a_granted_turn_whose_window_never_starts_lapses():
    owners = [1000, 2000, 3000]
    groups = {owner: workers_of(owner, 2) for owner in owners}
    policy = TreeSamplingPolicy(node_turns=1)
    policy.set_roles({w: ("worker", o) for o, ws in groups.items() for w in ws})
    for ws in groups.values():  # the first look: each on its own
        for w in ws:
            policy.window_started(w, 0.0)
            policy.window_finished(w, WAITING, settled=True, now=1.0)
    now = 1.0 + TURN_REST_S
    granted = [w for ws in groups.values() for w in ws if policy.wait_s(w, now) == 0]
    assert len(granted) == 1  # one turn for the tree
    # its window never starts: the others wait at most two polls more
    later = now + 2 * POLL_S + 0.5
    assert any(policy.wait_s(w, later) == 0 for ws in groups.values() for w in ws if w not in granted)
    # a rotating worker's dump takes no turn
    assert all(policy.wait_s(w, later, dump=True) == 0 for w in (min(ws) for ws in groups.values()))


def test_a_rotating_workers_one_tick_jitter_does_not_call_it_up_but_a_move_that_holds_does():
    """Alike workers taking turns (the tree policy's steady_pids) move only on two ticks running: one tick's jitter
    of its CPU calls nobody up; a move that holds is seen a tick later. A rank moves on its first tick."""
    workers = workers_of(RANK_A, 3)
    policy = TreeSamplingPolicy()
    policy.set_roles({RANK_A: ("rank", None), **{w: ("worker", RANK_A) for w in workers}})
    for pid in (RANK_A, *workers):
        policy.window_started(pid, 0.0)
        policy.window_finished(pid, WAITING, settled=True, now=1.0)
    steady = policy.steady_pids()
    assert steady == set(workers)
    detector = PhaseChangeDetector()
    calm = {pid: PhaseSignals(cpu_pct=10.0, main_thread_cpu_pct=10.0) for pid in (RANK_A, *workers)}
    busy = PhaseSignals(cpu_pct=95.0, main_thread_cpu_pct=95.0)
    for t in range(8):
        assert detector.observe(float(t), calm, steady=steady) is None
    # one tick of jitter on a worker: held back, then gone
    assert detector.observe(8.0, {**calm, workers[0]: busy}, steady=steady) is None
    assert detector.moved_pids == frozenset()
    assert detector.observe(9.0, calm, steady=steady) is None
    assert detector.moved_pids == frozenset()
    # a move that holds: called up on its second tick
    assert detector.observe(10.0, {**calm, workers[1]: busy}, steady=steady) is None
    assert detector.observe(11.0, {**calm, workers[1]: busy}, steady=steady) is not None
    assert detector.moved_pids == {workers[1]}
    # a rank (not steady) is called up on its first tick
    for t in range(12, 20):
        detector.observe(float(t), {**calm, workers[1]: busy}, steady=steady)
    assert detector.observe(20.0, {**calm, workers[1]: busy, RANK_A: busy}, steady=steady) is not None
    assert detector.moved_pids == {RANK_A}


def _rotating_worked_out_afresh(policy: TreeSamplingPolicy, owner):
    """rotating() as it was worked out before it was cached: every member walked on each call."""
    from collections import Counter
    siblings = {p: m for p, m in policy._members.items() if m.role == "worker" and m.owner == owner and owner}
    if len(siblings) < 2 or not all(m.seen for m in siblings.values()):
        return set()
    common, _ = Counter(m.picture for m in siblings.values()).most_common(1)[0]
    alike = {p for p, m in siblings.items() if m.picture == common and m.called_at is None}
    return alike if len(alike) >= 2 else set()


def test_the_cached_rotation_always_equals_the_rotation_worked_out_afresh():
    """rotating() is cached until a member's part, picture, seen or call-up changes: drive the policy through every
    kind of change at random and compare it, and every decision that rests on it, with a fresh walk each step."""
    import random
    rng = random.Random(19)
    policy = TreeSamplingPolicy()
    owners = (RANK_A, RANK_B, None)
    pictures = (WAITING, ("collate", "fetch.py"), None)
    pids = list(range(1000, 1012)) + [RANK_A, RANK_B]
    now = 0.0
    for step in range(3000):
        now += rng.choice((0.0, 0.25, 1.0))
        action = rng.randrange(7)
        pid = rng.choice(pids)
        if action == 0:
            roles = {p: (("worker", rng.choice(owners)) if p >= 1000 else ("rank", None))
                     for p in pids if rng.random() < 0.9}
            policy.set_roles(roles)
        elif action == 1:
            policy.called_up(rng.sample(pids, rng.randrange(3)), now)
        elif action == 2:
            policy.window_started(pid, now)
        elif action == 3:
            policy.window_finished(pid, rng.choice(pictures), settled=rng.random() < 0.7, now=now)
        elif action == 4:
            policy.window_dropped(pid)
        else:
            policy.wait_s(pid, now, dump=action == 6)
        for owner in owners:
            assert policy.rotating(owner) == _rotating_worked_out_afresh(policy, owner), step
        assert policy.steady_pids() == set().union(*(_rotating_worked_out_afresh(policy, o) for o in owners))
