"""The main thread's compiling over the compile look-backs (CompileHistory): torch.compile's one-time warm-up told
from a recompilation storm, since when it compiled, and until when; and the share of its samples that ran the
compiled code. Read from the per-frame stack summaries (frame_stacks.py); judged in rules/compile_warmup.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from probes.diagnosis.frame_stacks import frame_stacks
from probes.diagnosis.windows import recent
from probes.frame import Frame, StackFrame

COMPILE_HISTORY_S = 60.0  # how far back recompilations are looked for
# How far back the start of torch.compile's warm-up is looked for: the first compile of a large model takes minutes
# (tests/fixtures/h200/README.md), and the History holds ten. MAX_LOOKBACK_FRAMES still bounds the walk.
WARMUP_HISTORY_S = 600.0
# A compile that starts after this long without compiling begins a new account (a new shape late in the run): the
# warm-up's graphs come one after another, with at most an evaluation between them.
WARMUP_PAUSE_S = 60.0
COMPILE_FRAME_SHARE = 0.1  # a sample window "compiled" if this share of its main-thread samples did


@dataclass(frozen=True)
class CompileHistory:
    """The main thread's compiling as the frames show it, to tell torch.compile's one-time warm-up from a
    recompilation storm.

    A warm-up compiles each graph once, on its first call: the first compile, then a second graph (train after
    eval, backward after forward), each from its own call site, with training between them at most. A storm is
    the same call compiling again after the job ran on (a new shape each time), again and again. So "the job ran"
    is measured on whole stacks outside compiling (reaches_root), and a recompile is counted where a call site
    (compile_site) compiles after the job ran on since that site last compiled (see compile_history): not where a
    window merely held a sample outside compile frames, nor once a window while one compile goes on. At the settled
    py-spy rate a window holds 1-5 samples, and one leaf-only or empty stack among them made the 48-layer first
    compile of tests/fixtures/h200/gpt2xl_s1 a storm (docs/diagnosis.md). The job's log would say when steps
    complete, but during a warm-up it has printed none yet (that run's log had no step line), its steps may be
    logged only every few dozen, and many jobs have no log gputop can read: the stacks are there whenever a verdict
    is."""

    windows: int = 0  # sample windows over COMPILE_HISTORY_S in which the main thread compiled
    # Over COMPILE_HISTORY_S, the windows in which a call site compiled again after the job had run on.
    recompiles: int = 0
    share: float = 0.0  # of the main thread's samples over COMPILE_HISTORY_S, compiling
    # Over the whole walk (WARMUP_HISTORY_S): when the compiling began (the start of its first window, or of the
    # first after WARMUP_PAUSE_S without compiling), or None where the main thread was never seen compiling;
    # whether it was already under way in the first window gputop saw (so it began earlier), or in the first window
    # of a walk that does not reach back to attach (so it began before the walk, which then says nothing of how long
    # it took); whether whole stacks outside compiling were seen since it began (the compiled code or the job's
    # other work ran); recompiles since it began; and when the main thread began running outside compiling after
    # its last compile (None while it compiles, or before anything outside compiling showed).
    began: float | None = None
    under_way_at_attach: bool = False
    began_before_look_back: bool = False
    ran_since_began: bool = False
    recompiles_seen: int = 0
    ended: float | None = None


def _window_start(frame: Frame, main_pid: int) -> float:
    """When the samples of this frame's main process began: its record windows' start, else the tick's."""
    starts = [w.started for w in frame.stacks.windows if w.pid == main_pid]
    return min(starts) if starts else frame.time - frame.interval_s


def compile_history(history: Sequence[Frame], main_pid: int) -> CompileHistory:
    """The CompileHistory of `history` (oldest first): one walk over the last WARMUP_HISTORY_S."""
    frames = recent(history, WARMUP_HISTORY_S)
    storm_cutoff = frames[-1].time - COMPILE_HISTORY_S
    ran: set[StackFrame] = set()  # frames seen running outside compiling since their site last compiled
    # Sites that compiled, with whether their last window with compiling also ran outside compiling; and those after
    # whose last compile a whole window ran without compiling.
    compiled: dict[StackFrame, bool] = {}
    returned: set[StackFrame] = set()
    windows = recompiles = recompiles_seen = compiling = samples = 0
    began = ended = None
    under_way_at_attach = began_before_look_back = ran_since_began = seen_before = False
    for frame in frames:
        stacks = frame_stacks(frame, main_pid)
        if not stacks.main_samples:
            continue  # no window landed this tick: neither compiling nor running
        in_storm_look_back = frame.time >= storm_cutoff
        if in_storm_look_back:
            compiling += stacks.main_compile
            samples += stacks.main_samples
        mixed = stacks.main_ran > 0
        if stacks.main_compile / stacks.main_samples >= COMPILE_FRAME_SHARE:
            if ended is not None and _window_start(frame, main_pid) - ended >= WARMUP_PAUSE_S:
                began = None  # compiling again after a long stretch of running: counted from here
                ran_since_began, recompiles_seen = False, 0
            if began is None:
                # Compiling in the first window of the whole History: it began before gputop attached; in the
                # first of a walk cut short by its bounds: before the walk.
                under_way_at_attach = not seen_before and len(frames) == len(history)
                began_before_look_back = not seen_before and len(frames) < len(history)
                began = frames[0].time - frames[0].interval_s if not seen_before else _window_start(frame, main_pid)
            # Again: the site's own line ran since it last compiled, or a whole window ran without compiling since,
            # or it went from compiling to running and back twice (its last window with compiling ran too, and so
            # does this one: a storm of quick compiles shows in every window). Not merely running beside a site's
            # first compile: the first step's forward runs beside its backward's first compile.
            again = any(site in ran or site in returned or (compiled.get(site) and mixed)
                        for site in stacks.compile_sites)
            ran -= stacks.compile_sites  # a long compile is one recompile, not one a window
            returned -= stacks.compile_sites
            compiled.update(dict.fromkeys(stacks.compile_sites, mixed))
            recompiles_seen += again
            if in_storm_look_back:
                windows += 1
                recompiles += again
            ended = None
        elif mixed:
            returned.update(compiled)
            compiled.clear()
            if began is not None and ended is None:
                ended = _window_start(frame, main_pid)
        if began is not None and mixed:
            ran_since_began = True
        # Running in the same window as compiling counts for the next window only: within a window the order is
        # unknown, and the first call of a graph both compiles and runs it.
        ran |= stacks.ran_frames
        seen_before = True
    return CompileHistory(windows=windows, recompiles=recompiles, share=compiling / samples if samples else 0.0,
                          began=began, under_way_at_attach=under_way_at_attach,
                          began_before_look_back=began_before_look_back, ran_since_began=ran_since_began,
                          recompiles_seen=recompiles_seen, ended=ended)


def compiled_code_share(history: Sequence[Frame], main_pid: int) -> float:
    """The share of the main thread's samples over the compile look-back that ran torch.compile's compiled code.
    As long a look-back as the compile windows': a GPU-bound main thread shows in a window only a few samples,
    most of them waiting, and advice must not come and go with them."""
    compiled = samples = 0
    for frame in recent(history, COMPILE_HISTORY_S):
        stacks = frame_stacks(frame, main_pid)
        compiled += stacks.main_compiled_code
        samples += stacks.main_samples
    return compiled / samples if samples else 0.0
