"""The diagnosis rules' registry holds together: every bottleneck of the snapshot's vocabulary is declared by
exactly one rule module, with its words, and has a row in docs/diagnosis.md; every rule module is in RULES,
in the order the diagnosis has always tried them; every liveness state has its words.

Each test walks the registry or the package, so a companion left out (a module not in RULES, a bottleneck
without facts or a row in the docs) fails here rather than falling back silently elsewhere.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import probes.diagnosis.rules
from probes.diagnosis.bottlenecks import BOTTLENECK_FACTS, FACTS_BY_NAME, HUNG_BOTTLENECK_BY_ACTIVITY
from probes.diagnosis.rules import RULES
from probes.diagnosis.rules.unknown import UNKNOWN
from probes.diagnosis.stacks import ACTIVITIES
from probes.frame import BOTTLENECKS, LIVENESS_STATES
from tui.panes.text import BOTTLENECK_WORDS, LIVENESS_WORDS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "diagnosis.md"


def rule_package_modules():
    return [importlib.import_module(m.name)
            for m in pkgutil.iter_modules(probes.diagnosis.rules.__path__, "probes.diagnosis.rules.")]


def _calls_to(module, callee: str) -> list[ast.Call]:
    tree = ast.parse(Path(module.__file__).read_text())
    return [node for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == callee]


def declared_bottlenecks(module) -> list[str]:
    """The names of the BottleneckFacts this module creates itself (not those it imports)."""
    names = []
    for call in _calls_to(module, "BottleneckFacts"):
        name = next(k.value for k in call.keywords if k.arg == "name")
        assert isinstance(name, ast.Constant), f"{module.__name__}: a bottleneck's name must be a literal"
        names.append(name.value)
    return names


def test_every_bottleneck_is_declared_by_exactly_one_rule_module():
    declared: dict[str, list[str]] = {}
    for module in rule_package_modules():
        for name in declared_bottlenecks(module):
            declared.setdefault(name, []).append(module.__name__)
    assert sorted(declared) == sorted(BOTTLENECKS), "probes.frame.Bottleneck and the rules' facts differ"
    twice = {name: modules for name, modules in declared.items() if len(modules) > 1}
    assert not twice, f"declared by more than one module: {twice}"


def test_the_registry_holds_every_bottleneck_once_with_unknown_last():
    names = [facts.name for facts in BOTTLENECK_FACTS]
    assert len(names) == len(set(names))
    assert set(names) == set(BOTTLENECKS)
    assert BOTTLENECK_FACTS[-1] is UNKNOWN
    assert set(FACTS_BY_NAME) == set(BOTTLENECKS)


def test_every_rule_module_is_in_RULES_and_concludes_what_it_declares():
    listed = {id(rule) for rule in RULES}
    for module in rule_package_modules():
        rule = getattr(module, "RULE", None)
        if rule is None:
            continue
        assert id(rule) in listed, f"{module.__name__}.RULE is missing from RULES"
        assert sorted(f.name for f in rule.concludes) == sorted(declared_bottlenecks(module)), \
            f"{module.__name__}: its RULE concludes other bottlenecks than the module declares"


def test_a_rule_names_only_the_bottlenecks_its_module_declares():
    for module in rule_package_modules():
        own = set(declared_bottlenecks(module))
        for call in _calls_to(module, "Candidate"):
            named = call.args[0]
            if isinstance(named, ast.Constant):
                assert named.value in own, f"{module.__name__} concludes {named.value}, declared elsewhere"


def test_RULES_keeps_the_order_the_diagnosis_has_always_used():
    # The order decides which rule wins where several fit (see the comment on each slot in RULES): a change
    # here changes verdicts, so it is made on purpose, with this list and docs/diagnosis.md.
    assert [tuple(f.name for f in rule.concludes) for rule in RULES] == [
        ("compile_warmup",), ("checkpoint_save",), ("comms_bound",), ("gpu_bound", "gpu_throttled"),
        ("memory_bound",), ("cpu_throttled",), ("io_bound",), ("data_bound",), ("gil_contention",), ("cpu_bound",),
        ("idle",),
    ]


def test_every_bottleneck_has_its_own_words_on_screen():
    words = [facts.words for facts in BOTTLENECK_FACTS]
    assert all(w.strip() for w in words)
    assert len(words) == len(set(words)), "two bottlenecks would read the same on screen"
    assert set(BOTTLENECK_WORDS) == set(BOTTLENECKS)


def test_every_liveness_state_has_its_words_on_screen():
    assert set(LIVENESS_WORDS) == set(LIVENESS_STATES)
    assert all(w.strip() for w in LIVENESS_WORDS.values())


def test_the_facts_are_consistent():
    for facts in BOTTLENECK_FACTS:
        # The shared-CPU advice goes first only for verdicts that get it at all.
        assert facts.runs_on_host_cpu or not facts.short_of_host_cpu, facts.name
        assert set(facts.hung_in) <= set(ACTIVITIES), facts.name
    claimed = [activity for facts in BOTTLENECK_FACTS for activity in facts.hung_in]
    assert len(claimed) == len(set(claimed)), "a stuck activity names two bottlenecks"
    assert set(HUNG_BOTTLENECK_BY_ACTIVITY) == set(claimed)


def docs_rule_rows() -> list[tuple[str, tuple[str, ...]]]:
    """(module, bottlenecks) of each row of docs/diagnosis.md's rules table, in order."""
    rows = []
    for line in DOCS.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[1].endswith(".py`"):
            rows.append((cells[1].strip("`"), tuple(re.findall(r"`(\w+)`", cells[2]))))
    return rows


def test_the_docs_table_lists_the_rules_in_order_with_every_bottleneck():
    expected = [(f"{rule.evaluate.__module__.rsplit('.', 1)[1]}.py", tuple(f.name for f in rule.concludes))
                for rule in RULES]
    expected.append(("cannot_see.py", ("cannot_see",)))  # not rules: they stand where no rule can speak
    expected.append(("unknown.py", ("unknown",)))
    assert docs_rule_rows() == expected
    assert {name for _, names in docs_rule_rows() for name in names} == set(BOTTLENECKS)


# --- the rules on constructed frames: waiting on the GPU, and models that already run compiled (issue 29) -------
def _frames(counts, gpu=None, cpu: float = 100.0, n: int = 8):
    from support.frames import make_frame

    return [make_frame(i, counts=counts, cpu=cpu, gpu=gpu) for i in range(n)]


def _last(frames):
    from support.frames import run

    return run(frames)[-1]


def _said(verdict) -> str:
    return "\n".join(verdict.evidence + verdict.advice)


def test_a_main_thread_waiting_on_a_busy_gpu_is_never_called_idle():
    # The GPU runs kernels all the time but few SMs are at work (not gpu_bound); the main thread waits on it in
    # backward 60% of its samples, with little CPU. The idle rule's advice (shorten a sleep) would be wrong.
    from support.frames import BACKWARD, FORWARD, h200, main_count

    gpu = h200(util=100.0, power=300.0, sm_active=40.0)
    verdict = _last(_frames([main_count(BACKWARD, n=6, idle=True), main_count(FORWARD, n=4)], gpu=gpu, cpu=10.0))
    assert verdict.bottleneck != "idle", _said(verdict)
    assert "not training most of the time" not in _said(verdict)
    # Beside a quiet GPU the same waiting is idle, as before.
    quiet = _last(_frames([main_count(BACKWARD, n=6, idle=True), main_count(FORWARD, n=4)], gpu=h200(util=2.0),
                          cpu=10.0))
    assert quiet.bottleneck == "idle"


def _compiled_model_stack(line: int = 224):
    """The real backward of a compiled model on CPU (tests/support/compiled_code.py), at one line of the generated
    code."""
    import dataclasses

    from support.compiled_code import COMPILED_BACKWARD

    return (dataclasses.replace(COMPILED_BACKWARD[0], line=line),) + COMPILED_BACKWARD[1:]


def test_a_cpu_bound_compiled_model_is_named_as_compiled_code_and_not_advised_to_compile():
    # nanochat's base_train and litgpt's pretrain on CPU: the hot frame is Inductor's generated Runner.call.
    from support.frames import main_count

    # Two lines of the generated code, as a running loop shows (one stack all along is one long native call).
    verdict = _last(_frames([main_count(_compiled_model_stack(224), n=6), main_count(_compiled_model_stack(207), n=4)]))
    assert verdict.bottleneck == "cpu_bound"
    said = _said(verdict)
    assert "your own Python" not in said and "torch.compile it" not in said, said
    assert "torch.compile's generated code czn2vzoo….py:224" in verdict.evidence[0], verdict.evidence
    advice = "\n".join(verdict.advice)
    assert "The hot frame is Runner.call (torch.compile's generated code czn2vzoo….py:224): the model already runs " \
           "compiled" in advice, advice


def test_own_python_beside_a_compiled_model_is_not_advised_to_compile_either():
    from support.frames import ROOT, fr, main_count

    own_loop = (fr("shuffle_tokens", "/home/alice/compiled_train.py", 30),) + ROOT
    verdict = _last(_frames([main_count(own_loop, n=7), main_count(_compiled_model_stack(), n=3)]))
    assert verdict.bottleneck == "cpu_bound"
    advice = "\n".join(verdict.advice)
    assert "The hot frame is your own Python (shuffle_tokens" in advice and "torch.compile" not in advice, advice
    # The same loop in an eager job is still told that torch.compile is a way.
    other_line = (fr("shuffle_tokens", "/home/alice/compiled_train.py", 31),) + ROOT
    eager = _last(_frames([main_count(own_loop, n=6), main_count(other_line, n=4)]))
    assert "or torch.compile it" in "\n".join(eager.advice)


def test_a_gpu_bound_compiled_model_is_not_advised_to_compile():
    from support.frames import FORWARD, h200, main_count

    compiled = _last(_frames([main_count(_compiled_model_stack(), n=10)], gpu=h200(), cpu=35.0))
    assert compiled.bottleneck == "gpu_bound"
    assert "torch.compile" not in "\n".join(compiled.advice), compiled.advice
    eager = _last(_frames([main_count(FORWARD, n=10)], gpu=h200(), cpu=35.0))
    assert eager.advice[0].startswith("Compile the model: torch.compile(model)")


def test_a_launch_bound_compiled_model_is_told_of_cuda_graphs_not_to_compile():
    from support.frames import h200, main_count

    gpu = h200(util=97.0, sm=1980, power=180.0, sm_active=12.0)
    verdict = _last(_frames([main_count(_compiled_model_stack(), n=10)], gpu=gpu, cpu=100.0))
    assert verdict.bottleneck == "cpu_bound" and "launch-bound" in verdict.evidence[0]
    advice = "\n".join(verdict.advice)
    assert "torch.compile(model" not in advice and "(torch.compile)" not in advice, advice
    assert "mode='reduce-overhead'" in advice and "already runs compiled" in advice


def test_a_loop_that_sleeps_most_of_each_step_is_idle_though_its_main_thread_uses_a_third_of_a_core():
    # tests/targets/job_train.py with --step-ms 5 on a quiet 2-core machine (issue 37): the main thread sleeps in the
    # loop 77% of its samples and waits for a batch 23%; its own work between the sleeps is ~30% of a core, and the
    # process uses no more than that. Nothing works beside the main thread, so this is idleness: no rule fit.
    from support.frames import DATALOADER_WAIT, SLEEP, main_count, make_frame, run, text

    def frame(i, process_cpu, main_thread_cpu):
        return make_frame(i, counts=[main_count(SLEEP, n=10, idle=True), main_count(DATALOADER_WAIT, n=3, idle=True)],
                          cpu=process_cpu, main_thread_cpu_pct=main_thread_cpu, main_thread_runqueue_pct=2.0)

    verdict = run([frame(i, 32.0, 30.0) for i in range(8)])[-1]
    assert verdict.bottleneck == "idle", text(verdict)
    assert "not training most of the time" in text(verdict)
    # The same waits while another thread of the process keeps a core busy: that thread works, so not idle.
    working_beside = run([frame(i, 130.0, 30.0) for i in range(8)])[-1]
    assert working_beside.bottleneck != "idle", text(working_beside)
