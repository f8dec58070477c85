"""The cgroup memory probe and the growth estimator on real processes in real memory cgroups made here (v1's memory
controller where the machine mounts it, else a cgroup2 group with memory delegated): a target growing at a set
rate toward a 512 MiB limit, whose rate and time to the limit are stated and then checked against the target's own
RSS and the moment the OOM killer ends it; and a target killed past a 64 MiB limit, its kill seen in the next read.
And a forked worker that only reads its parent's list of objects, its pages turning private (copy-on-read)."""

from __future__ import annotations

import threading
import time

import pytest

from probes.sensors.cgroup import CgroupMemoryProbe
from probes.sensors.memory_growth import copy_on_read, fit_line, memory_growth
from probes.sensors.proc_readers import read_smaps_rollup

MIB = 1 << 20
pytestmark = pytest.mark.slow


def _collect_lines(stream, lines: list[str]) -> threading.Thread:
    def pump() -> None:
        for line in stream:
            lines.append(line.strip())

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    return thread


def test_growth_rate_and_time_to_limit_hold_until_the_oom_kill(memory_group, spawn_target):
    limit = 512 * MIB
    group = memory_group(limit)
    lines: list[str] = []
    target = spawn_target("memory_grower.py", "--rate-mib", "8", "--seconds", "240", stdout=-1, text=True,
                          preexec_fn=group.join)
    _collect_lines(target.stdout, lines)
    probe = CgroupMemoryProbe(target.pid)

    # One read a second, as a tick, until the estimator claims a rate (a state: enough points over enough time).
    points: list[tuple[float, int]] = []
    deadline = time.monotonic() + 150
    growth = None
    while time.monotonic() < deadline and target.poll() is None:
        reading = probe.read()
        if reading.usage_bytes is not None:
            points.append((time.time(), reading.usage_bytes))
        growth = memory_growth(points, reading.limit_bytes)
        if growth.growing:
            break
        time.sleep(1.0)
    assert growth is not None and growth.growing, (growth, points[-3:])
    stated_at = points[-1][0]
    assert reading.cgroup_version == group.version and reading.cgroup_path == f"/{group.path.name}"
    assert reading.limit_bytes == limit and reading.limit_source == str(group.path)

    # The target's own rate over the same window, from the RSS it measured itself.
    own = [(float(t), float(b)) for _, t, b in (line.split() for line in list(lines) if line.startswith("rss "))]
    own_fit = fit_line([p for p in own if points[-growth.points][0] <= p[0] <= stated_at])
    assert own_fit is not None
    stated_rate, true_rate = growth.rate_bytes_per_s, own_fit.slope
    assert stated_rate == pytest.approx(true_rate, rel=0.2), (stated_rate / MIB, true_rate / MIB)

    # Then the limit comes when it said: the OOM killer ends the target, seen by the next read.
    assert growth.seconds_to_limit is not None
    before = probe.read()
    killed_at = None
    while time.monotonic() < deadline + 120:
        if target.poll() is not None:
            killed_at = time.time()
            break
        time.sleep(0.1)
    assert killed_at is not None and target.returncode == -9, target.returncode
    after = probe.read()
    assert after.oom_kills_new is not None and after.oom_kills_new >= 1, (before, after)
    assert after.oom_kills_total == (before.oom_kills_total or 0) + after.oom_kills_new
    true_to_limit = killed_at - stated_at
    print(f"stated {stated_rate / MIB:.2f} MiB/s, target's own {true_rate / MIB:.2f} MiB/s; "
          f"stated {growth.seconds_to_limit:.1f} s to the limit, killed after {true_to_limit:.1f} s "
          f"(stated after {growth.span_s:.0f} s over {growth.points} reads)")
    assert growth.seconds_to_limit == pytest.approx(true_to_limit, rel=0.2)


def test_an_oom_kill_is_seen_in_the_read_after_it(memory_group, spawn_target):
    group = memory_group(64 * MIB)
    target = spawn_target("memory_grower.py", "--rate-mib", "64", "--go-on-stdin", stdin=-1, stdout=-1, text=True,
                          preexec_fn=group.join)
    assert target.stdout.readline().strip() == "ready"
    probe = CgroupMemoryProbe(target.pid)
    first = probe.read()
    assert first.cgroup_path == f"/{group.path.name}" and first.limit_bytes == 64 * MIB
    assert first.oom_kills_total == 0 and first.reason is None, first

    target.stdin.write("go\n")
    target.stdin.flush()
    assert target.wait(timeout=60) == -9, "ended by SIGKILL: the OOM killer"
    after = probe.read()
    assert after.oom_kills_new == 1 and after.oom_kills_total == 1, after
    assert after.max_events_new is not None and after.max_events_new > 0, "it hit its limit first"
    assert after.cgroup_path == first.cgroup_path and "target gone" in (after.reason or "")


def test_a_worker_reading_its_parents_objects_turns_their_pages_private(spawn_target):
    target = spawn_target("copy_on_read.py", "--seconds", "120", stdout=-1, text=True, timeout=60)
    line = target.stdout.readline().split()
    assert line[0] == "worker", line
    worker = int(line[1])
    samples = []
    deadline = time.monotonic() + 100
    found = None
    while time.monotonic() < deadline:
        rollup = read_smaps_rollup(worker)
        assert rollup is not None, "the worker's smaps_rollup"
        samples.append((time.time(), rollup))
        found = copy_on_read(samples)
        if found.turning_private:
            break
        time.sleep(1.0)
    assert found is not None and found.turning_private, found
    assert found.private.rate_bytes_per_s is not None and found.shared.rate_bytes_per_s is not None
    print(f"copy-on-read: private {found.private.rate_bytes_per_s / MIB:+.2f} MiB/s, "
          f"shared {found.shared.rate_bytes_per_s / MIB:+.2f} MiB/s after {found.private.span_s:.0f} s")
