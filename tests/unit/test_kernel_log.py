"""The kernel log sensor (probes/sensors/kernel_log.py) on transcripts of real lines and on a fake /dev/kmsg.

Where each line's format comes from:
- Xid with `pid=..., name=...`: the NVIDIA driver's own format, e.g. NVIDIA/open-gpu-kernel-modules issue #1150
  ("NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149"); with a
  name holding punctuation: Modal's GPU health guide (modal.com/docs/guide/gpu-health, "NVRM: Xid
  (PCI:0000:c6:00): 79, pid=1101234, name=nvc:[driver], GPU has fallen off the bus.").
- Xid with `pid='<unknown>', name=<unknown>`: leptonai/gpud pull request #46 (dmesg of an A100/H100 node, Xid 13
  and 109) and vllm-project/vllm issue #5901 (A800, driver 535).
- Xid without pid (older drivers, or where the driver does not print it): NVIDIA/open-gpu-kernel-modules issue
  #1151 ("NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus."), noonghunna/club-3090 issue #751
  ("NVRM: Xid (PCI:0000:07:00): 13, Graphics Exception: ..."), Bumblebee-Project/Bumblebee issue #677 (Xid 32
  and 31), and the oldest form without "PCI:" from a pastebin (pastebin.com/NGng33SB, "NVRM: Xid (0000:01:00):
  31, Ch 0000000b, engmask 00000120, intr 10000000").
- OOM: mm/oom_kill.c's format strings ("%s: Killed process %d (%s) total-vm:%lukB, anon-rss:%lukB, file-rss:%lukB,
  shmem-rss:%lukB, UID:%u pgtables:%lukB oom_score_adj:%hd" in __oom_kill_process; "oom-kill:constraint=%s,
  nodemask=%*pbl" + ",task=%s,pid=%d,uid=%d" in dump_oom_victim, formerly dump_oom_summary with "%5d"), as
  quoted in the linux-mm patches that changed them; the lines below were logged by this machine's kernel
  (6.18, cgroup v1) for a 64 MiB memory cgroup.
- segfault: arch/x86/mm/fault.c show_signal_msg ("%s%s[%d]: segfault at %lx ip %px sp %px error %lx", then
  print_vma_addr's " in %s[...]" and, on newer kernels, " likely on CPU ..."); the 6.x line below was logged by
  this machine's kernel for `python3 -c "import ctypes; ctypes.string_at(0)"`; the older " in libfoo[start+size]"
  form is from a public note on Linux traps (GitHub, found by the search tool: "a.out[40342]: segfault at 0 ip
  00000000004005b1 sp 00007ffc5b1be400 error 4 in a.out[400000+1000]").
- general protection: arch/x86/kernel/traps.c (pr_fmt "traps: ", "%s[%d] %s%s ip:%lx sp:%lx error:%lx" then
  " in ..."); lines quoted in public GitHub documents found by the search tool ("traps: tincd[3995] general
  protection fault ip:7f6ad09944eb sp:7ffda3da5ea8 error:0 in ld-musl-x86_64.so.1[7f6ad098b000+46000]" and a
  python one with the newer "[offset,start+size]").
- /dev/kmsg records: Documentation/ABI/testing/dev-kmsg (PRI,SEQ,TS_USEC,FLAGS;text, \\xNN escapes, " KEY=value"
  dictionary lines), and records read here (the "\\x09" and SUBSYSTEM=/DEVICE= ones below are this machine's).
"""

from __future__ import annotations

import errno

import pytest

from probes.sensors import kernel_log
from probes.sensors.kernel_log import (
    MAX_EVENTS,
    XID_MEANINGS,
    KernelLog,
    SharedKernelLog,
    join_oom,
    normalise_pci_bus_id,
    parse_kmsg_record,
    parse_line,
    xid_meaning,
)

# --- PCI bus ids ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "written",
    [
        "00000000:3B:00.0",  # NVML nvmlDeviceGetPciInfo().busId
        b"00000000:3B:00.0",  # older pynvml hands bytes
        "0000:3b:00.0",  # NVML busIdLegacy, sysfs, lspci -D
        "0000:3b:00",  # the driver's Xid line
        "PCI:0000:3b:00",  # as it stands inside the Xid line's parentheses
        "3b:00.0",  # lspci without a domain
        "00000000:3B:00.0\x00",  # a C string read whole
    ],
)
def test_every_form_of_a_bus_id_normalises_to_nvmls(written):
    assert normalise_pci_bus_id(written) == "00000000:3B:00.0"


def test_bus_ids_that_differ_stay_different_and_junk_is_none():
    assert normalise_pci_bus_id("0001:3b:00") == "00000001:3B:00.0"
    assert normalise_pci_bus_id("0000:3b:00.1") == "00000000:3B:00.1"
    assert normalise_pci_bus_id("0000:3c:00") != normalise_pci_bus_id("0000:3b:00")
    for junk in (None, "", "GPU-0b11d014", "0000:3b", "0000:3b:00.9", "zz:00.0"):
        assert normalise_pci_bus_id(junk) is None


# --- Xid lines ------------------------------------------------------------------------------------------


def test_xid_with_pid_and_name():
    event = parse_line("NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by "
                       "previous Xid 149", wall_time=1.5)
    assert event is not None and event.kind == "xid"
    assert (event.code, event.pid, event.process_name, event.pci_bus_id) == (45, 1818990, "python3",
                                                                            "00000000:DC:00.0")
    assert event.detail == "Ch 00000001 caused by previous Xid 149"
    assert event.wall_time == 1.5
    assert xid_meaning(event) is not None and xid_meaning(event).points_at == "application"


def test_xid_79_with_a_name_that_holds_punctuation():
    line = "NVRM: Xid (PCI:0000:c6:00): 79, pid=1101234, name=nvc:[driver], GPU has fallen off the bus."
    event = parse_line(line)
    assert event is not None
    assert (event.code, event.pid, event.process_name) == (79, 1101234, "nvc:[driver]")
    assert event.pci_bus_id == "00000000:C6:00.0"
    assert event.detail == "GPU has fallen off the bus."
    assert event.raw == line
    assert xid_meaning(event) is not None and xid_meaning(event).points_at == "node"


@pytest.mark.parametrize(
    ("line", "code", "bus", "detail"),
    [
        ("NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 7, "
         "TPC 7, SM 0): Illegal Instruction Parameter", 13, "00000000:CB:00.0",
         "Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter"),
        ("NVRM: Xid (PCI:0000:43:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception: ESR "
         "0x52e7b0=0x101000e 0x52e7b4=0x4 0x52e7a8=0xc81eb60 0x52e7ac=0x1174", 13, "00000000:43:00.0",
         "Graphics Exception: ESR 0x52e7b0=0x101000e 0x52e7b4=0x4 0x52e7a8=0xc81eb60 0x52e7ac=0x1174"),
        ("NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.", 79, "00000000:2B:00.0",
         "GPU has fallen off the bus."),
        ("NVRM: Xid (PCI:0000:07:00): 13, Graphics Exception: SKEDCHECK02_LOCAL_MEMORY_LOW_SIZE failed", 13,
         "00000000:07:00.0", "Graphics Exception: SKEDCHECK02_LOCAL_MEMORY_LOW_SIZE failed"),
        ("NVRM: Xid (PCI:0000:01:00): 32, Channel ID 00000000 intr 00004000", 32, "00000000:01:00.0",
         "Channel ID 00000000 intr 00004000"),
        ("NVRM: Xid (0000:01:00): 31, Ch 0000000b, engmask 00000120, intr 10000000", 31, "00000000:01:00.0",
         "Ch 0000000b, engmask 00000120, intr 10000000"),
    ],
)
def test_xid_without_a_process(line, code, bus, detail):
    event = parse_line(line)
    assert event is not None and event.kind == "xid"
    assert (event.code, event.pci_bus_id, event.detail) == (code, bus, detail)
    assert event.pid is None and event.process_name is None


def test_xid_pasted_from_dmesg_or_the_journal():
    dmesg = parse_line("[93297.027938] NVRM: Xid (PCI:0000:43:00): 13, pid='<unknown>', name=<unknown>, "
                       "Graphics Exception: ESR 0x52ef30=0x0")
    journal = parse_line("May 18 19:02:39 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.")
    assert dmesg is not None and dmesg.code == 13 and dmesg.raw.startswith("NVRM:")
    assert journal is not None and journal.code == 79 and journal.pci_bus_id == "00000000:2B:00.0"


def test_xid_table_names_the_common_codes_and_who_they_point_at():
    required = {13, 31, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 119, 120}
    assert required <= set(XID_MEANINGS)
    for code in (13, 31, 43, 45):
        assert XID_MEANINGS[code].points_at == "application"
    for code in (48, 63, 64, 74, 79, 92, 94, 95, 119, 120):
        assert XID_MEANINGS[code].points_at == "node"
    assert all(meaning.meaning for meaning in XID_MEANINGS.values())


# --- OOM kills ------------------------------------------------------------------------------------------

# Logged by this machine's kernel (6.18) for a python3 allocating 1 GB in a 64 MiB v1 memory cgroup.
OOM_SUMMARY = ("oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
               "oom_memcg=/gputop_probe_11289,task_memcg=/gputop_probe_11289,task=python3,pid=13409,uid=0")
OOM_KILLED = ("Memory cgroup out of memory: Killed process 13409 (python3) total-vm:1065160kB, anon-rss:65280kB, "
              "file-rss:6624kB, shmem-rss:0kB, UID:0 pgtables:188kB oom_score_adj:0")


def test_memcg_oom_kill_line():
    event = parse_line(OOM_KILLED)
    assert event is not None and event.kind == "oom_kill"
    assert (event.pid, event.process_name, event.memcg, event.anon_rss_kb) == (13409, "python3", True, 65280)
    assert event.memcg_path is None


def test_oom_summary_line_with_the_memcg_path():
    event = parse_line(OOM_SUMMARY)
    assert event is not None and event.kind == "oom_kill"
    assert (event.pid, event.process_name, event.memcg) == (13409, "python3", True)
    assert event.memcg_path == "/gputop_probe_11289"


def test_machine_wide_oom_and_the_older_forms():
    machine = parse_line("Out of memory: Killed process 2511 (python) total-vm:98304000kB, anon-rss:91234560kB, "
                         "file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:180000kB oom_score_adj:0")
    assert machine is not None and machine.memcg is False and machine.anon_rss_kb == 91234560
    # Before 4.19 the line had no "<why>: " prefix and ended at shmem-rss: it does not say whether memcg.
    old = parse_line("Killed process 2511 (python) total-vm:1000kB, anon-rss:500kB, file-rss:0kB, shmem-rss:0kB")
    assert old is not None and old.pid == 2511 and old.memcg is None and old.anon_rss_kb == 500
    # 4.19-5.x padded the summary's pid and uid with %5d.
    padded = parse_line("oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,"
                        "global_oom,task_memcg=/user.slice,task=python,pid= 2511,uid= 1000")
    assert padded is not None and padded.pid == 2511 and padded.memcg is False
    assert padded.memcg_path == "/user.slice"


def test_the_two_lines_of_one_kill_join_into_one_event():
    summary, killed = parse_line(OOM_SUMMARY, 10.0), parse_line(OOM_KILLED, 10.1)
    assert summary is not None and killed is not None
    joined = join_oom(summary, killed)
    assert (joined.pid, joined.memcg, joined.memcg_path, joined.anon_rss_kb) == (13409, True,
                                                                                "/gputop_probe_11289", 65280)
    assert joined.wall_time == 10.1 and OOM_SUMMARY in joined.raw and OOM_KILLED in joined.raw


# --- segfaults ------------------------------------------------------------------------------------------


def test_segfault_on_a_6x_kernel():
    line = ("python3[13231]: segfault at 0 ip 00007f85da985ad8 sp 00007ffcc504e348 error 4 in "
            "libc.so.6[167ad8,7f85da844000+156000] likely on CPU 0 (core 0, socket 0)")
    event = parse_line(line)
    assert event is not None and event.kind == "segfault"
    assert (event.pid, event.process_name, event.address, event.library, event.code) == (
        13231, "python3", "0", "libc.so.6", 4)


def test_segfault_older_form_and_without_a_library():
    old = parse_line("a.out[40342]: segfault at 0 ip 00000000004005b1 sp 00007ffc5b1be400 error 4 in "
                     "a.out[400000+1000]")
    assert old is not None and (old.pid, old.library, old.address) == (40342, "a.out", "0")
    anonymous = parse_line("pt_main_thread[77]: segfault at 7f0000001000 ip 00007f0000000abc sp 00007ffd00000000 "
                           "error 6")
    assert anonymous is not None and anonymous.process_name == "pt_main_thread"
    assert anonymous.address == "7f0000001000" and anonymous.library is None and anonymous.code == 6
    spaced = parse_line("Web Content[4242]: segfault at 8 ip 00007f00 sp 00007ffd error 4 in libxul.so[7f00+100]")
    assert spaced is not None and spaced.process_name == "Web Content" and spaced.pid == 4242


def test_general_protection_fault():
    event = parse_line("traps: tincd[3995] general protection fault ip:7f6ad09944eb sp:7ffda3da5ea8 error:0 in "
                       "ld-musl-x86_64.so.1[7f6ad098b000+46000]")
    assert event is not None and event.kind == "segfault"
    assert (event.pid, event.process_name, event.library, event.address) == (3995, "tincd",
                                                                             "ld-musl-x86_64.so.1", None)
    assert event.detail == "general protection fault"
    newer = parse_line("traps: python[5001] general protection fault ip:184cfbb sp:7db4ad1fd220 error:0 in "
                       "python3.12[13f2fbb,1600000+8d5000]")
    assert newer is not None and (newer.pid, newer.library) == (5001, "python3.12")


@pytest.mark.parametrize(
    "line",
    [
        "NVRM: GPU at PCI:0000:2b:00: GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae",
        "NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.",
        "python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
        "r8169 0000:03:00.0 eth0: RTL8125B, 58:47:ca:7b:55:71, XID 641, IRQ 51",
        "Code: e1 ff ff ff c3 66 2e 0f 1f 84 00 00",
        "",
    ],
)
def test_other_lines_are_not_events(line):
    assert parse_line(line) is None


# --- /dev/kmsg records ----------------------------------------------------------------------------------


def test_kmsg_record_fields_escapes_and_dictionary():
    record = parse_kmsg_record(b"6,190,288690,-;acpi PNP0A08:00: _OSC: OS supports [ExtendedConfig]\n"
                               b" SUBSYSTEM=acpi\n DEVICE=+acpi:PNP0A08:00\n")
    assert record is not None
    assert (record.priority, record.sequence, record.monotonic_us, record.flags) == (6, 190, 288690, "-")
    assert record.text == "acpi PNP0A08:00: _OSC: OS supports [ExtendedConfig]"
    assert record.dictionary == (("SUBSYSTEM", "acpi"), ("DEVICE", "+acpi:PNP0A08:00"))
    tab = parse_kmsg_record(b"6,89,233685,-;rcu: \\x09RCU restricting CPUs from NR_CPUS=256 to nr_cpu_ids=2.\n")
    assert tab is not None and tab.text == "rcu: \tRCU restricting CPUs from NR_CPUS=256 to nr_cpu_ids=2."
    # A message that held a newline keeps it escaped in one record; a backslash is escaped too.
    two = parse_kmsg_record(b"4,7,100,-;NVRM: The NVIDIA GPU 0000:b3:00.0\\x0aNVRM: fallen off the bus\\x5c.\n")
    assert two is not None and two.text == "NVRM: The NVIDIA GPU 0000:b3:00.0\nNVRM: fallen off the bus\\."


def test_kmsg_record_with_more_prefix_fields_and_junk():
    caller = parse_kmsg_record(b"6,12,345,-,caller=T123;python3[9]: segfault at 0 ip 0 sp 0 error 4\n")
    assert caller is not None and caller.sequence == 12 and caller.text.startswith("python3[9]")
    assert parse_kmsg_record(b"no semicolon here") is None
    assert parse_kmsg_record(b"6,x,1,-;text") is None
    assert parse_kmsg_record(b"6,1;text") is None


# --- the reader, on a fake /dev/kmsg --------------------------------------------------------------------


class FakeKmsg:
    """Hands out records one per read(); an exception instance in the list is raised at its turn; EAGAIN at
    the end, as /dev/kmsg opened O_NONBLOCK does."""

    def __init__(self, items: list[bytes | OSError]) -> None:
        self.items = list(items)
        self.closed = False
        self.reads = 0

    def read(self, size: int) -> bytes:
        self.reads += 1
        if not self.items:
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        item = self.items.pop(0)
        if isinstance(item, OSError):
            raise item
        assert len(item) <= size
        return item

    def close(self) -> None:
        self.closed = True

    def add(self, *items: bytes | OSError) -> None:
        self.items.extend(items)


def record(seq: int, seconds: float, text: str, flags: str = "-", priority: int = 3) -> bytes:
    return f"{priority},{seq},{round(seconds * 1e6)},{flags};{text}\n".encode()


XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
BOOT_WALL = 1_700_000_000.0  # the wall time the machine booted, in these tests


def reader(fake: FakeKmsg, now: float = 2000.0, **kwargs) -> tuple[KernelLog, list[float]]:
    clock = [now]
    log = KernelLog(opener=lambda: fake, monotonic=lambda: clock[0], wall_clock=lambda: BOOT_WALL + clock[0],
                    **kwargs)
    return log, clock


def test_first_read_returns_the_look_back_then_only_what_is_new():
    fake = FakeKmsg([
        record(1, 10.0, XID_79),  # long before the look-back: not news
        record(2, 1500.0, "unrelated line"),
        record(3, 1990.0, XID_79.replace("3b", "3c")),
    ])
    log, clock = reader(fake, now=2000.0, look_back_s=600)
    first = log.read_new()
    assert [e.pci_bus_id for e in first] == ["00000000:3C:00.0"]
    assert first[0].wall_time == pytest.approx(BOOT_WALL + 1990.0)
    assert log.read_new() == () and log.reason is None
    fake.add(record(4, 2001.0, XID_79))
    clock[0] = 2001.5
    again = log.read_new()
    assert len(again) == 1 and again[0].wall_time == pytest.approx(BOOT_WALL + 2001.0)
    assert log.recent == first + again


def test_one_shared_read_a_tick_gives_each_engine_its_own_view():
    """`gputop serve` watching several jobs reads the log once a tick: each engine's view gets every event once,
    and one that starts later gets what was kept (the look-back included) at its first read."""
    fake = FakeKmsg([record(1, 1990.0, XID_79)])
    log, clock = reader(fake, now=2000.0, look_back_s=600)
    shared = SharedKernelLog(log)
    first = shared.view()
    shared.refresh()
    assert [e.kind for e in first.read_new()] == ["xid"] and first.read_new() == ()
    fake.add(record(2, 2001.0, XID_79.replace("3b", "3c")))
    clock[0] = 2001.5
    shared.refresh()
    later = shared.view()  # a job found after both reads
    reads = fake.reads
    assert [e.pci_bus_id for e in first.read_new()] == ["00000000:3C:00.0"]
    assert [e.pci_bus_id for e in later.read_new()] == ["00000000:3B:00.0", "00000000:3C:00.0"]
    assert later.read_new() == () and fake.reads == reads  # the views read nothing themselves
    later.close()  # an engine closing its view leaves the shared log open
    shared.refresh()
    assert shared.reason is None


def test_epipe_skips_ahead_and_reading_goes_on():
    fake = FakeKmsg([
        record(1, 100.0, XID_79),
        BrokenPipeError(errno.EPIPE, "Broken pipe"),  # records 2..9 were overwritten before this reader got there
        record(10, 101.0, OOM_KILLED),
    ])
    log, _ = reader(fake, now=102.0)
    events = log.read_new()
    assert [e.kind for e in events] == ["xid", "oom_kill"]
    assert log.overruns == 1 and log.reason is None


def test_a_kill_whose_lines_straddle_two_reads_is_one_event():
    fake = FakeKmsg([record(1, 100.0, OOM_SUMMARY, priority=6)])
    log, clock = reader(fake, now=100.001)
    assert log.read_new() == ()  # the summary waits a moment for its "Killed process"
    fake.add(record(2, 100.002, OOM_KILLED))
    clock[0] = 100.5
    (event,) = log.read_new()
    assert (event.pid, event.memcg, event.memcg_path, event.anon_rss_kb) == (13409, True, "/gputop_probe_11289",
                                                                            65280)


def test_a_summary_without_its_killed_line_is_returned_alone_after_a_while():
    fake = FakeKmsg([record(1, 100.0, OOM_SUMMARY)])
    log, clock = reader(fake, now=100.0)
    assert log.read_new() == ()
    clock[0] = 105.0
    (event,) = log.read_new()
    assert event.memcg_path == "/gputop_probe_11289" and event.anon_rss_kb is None


def test_a_line_split_over_records_on_old_kernels_is_joined():
    fake = FakeKmsg([
        record(1, 50.0, "python[77]: segfault at 0 ip 00007f00 sp 00007ffd error 4", flags="c"),
        record(2, 50.0, " in libtorch_cuda.so[7f00+1000]", flags="+"),
        record(3, 50.1, "next line"),
    ])
    log, _ = reader(fake, now=51.0)
    (event,) = log.read_new()
    assert event.library == "libtorch_cuda.so" and event.pid == 77


def test_a_message_with_an_escaped_newline_yields_the_event_on_its_second_line():
    text = "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.\\x0a" + XID_79
    log, _ = reader(FakeKmsg([record(1, 5.0, text)]), now=6.0)
    (event,) = log.read_new()
    assert event.code == 79 and event.raw == XID_79


def test_a_storm_keeps_the_newest_events_and_a_tick_reads_a_bounded_number_of_records(monkeypatch):
    monkeypatch.setattr(kernel_log, "MAX_RECORDS_PER_READ", 600)
    fake = FakeKmsg([record(i, 10.0 + i / 1000, XID_79.replace("1234", str(i))) for i in range(1000)])
    log, _ = reader(fake, now=20.0)
    first = log.read_new()
    assert len(first) == MAX_EVENTS and first[-1].pid == 599  # the tick stopped at 600 records
    second = log.read_new()
    assert second[-1].pid == 999 and len(log.recent) == MAX_EVENTS


def test_no_permission_says_dmesg_restrict_and_the_fix(tmp_path, monkeypatch):
    restrict = tmp_path / "dmesg_restrict"
    restrict.write_text("1\n")
    monkeypatch.setattr(kernel_log, "DMESG_RESTRICT_PATH", str(restrict))

    def refuse():
        raise PermissionError(errno.EPERM, "Operation not permitted")

    log = KernelLog(opener=refuse)
    assert log.read_new() == () and log.read_new() == ()
    assert log.reason == ("the kernel log is unreadable as this user (kernel.dmesg_restrict=1): run gputop as root "
                          "or with CAP_SYSLOG")


def test_no_device_and_a_read_error_say_so_and_never_raise():
    def missing():
        raise FileNotFoundError(errno.ENOENT, "No such file or directory")

    log = KernelLog("/nowhere/kmsg", opener=missing)
    assert log.read_new() == ()
    assert log.reason is not None and "/nowhere/kmsg does not exist" in log.reason

    fake = FakeKmsg([record(1, 1.0, XID_79), OSError(errno.EIO, "Input/output error")])
    broken, _ = reader(fake, now=2.0)
    assert len(broken.read_new()) == 1
    assert broken.reason is not None and "Input/output error" in broken.reason and fake.closed
    assert broken.read_new() == ()


def test_an_unexpected_error_becomes_the_reason():
    class Odd(FakeKmsg):
        def read(self, size: int) -> bytes:
            raise RuntimeError("odd")

    log, _ = reader(Odd([]))
    assert log.read_new() == () and log.reason == "kernel log read failed: odd"
