"""`gputop probe --like PID` without starting a process: each setting read from a job's command line and files with
where it came from (nanoGPT's train.py, its config file and overrides, as configurator.py applies them; a Hugging Face
config.json and the flags beside it), what cannot be read said and asked for, flags given said as given, the probe's
GPU refused where the job runs, and a PID that is no readable job one line. tests/e2e/test_probe_like_e2e.py runs it
on a real job."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
from support.nanogpt_case import xl_probe_on_h200
from support.paths import REPO

from probes.frame import GpuDevice, GpuProcess, GpuReading
from probes.jobs.job_command_line import read_job_settings
from probes.models.gpt2 import GptShape
from probes.models.hf_command_line import read_settings as hf_settings
from probes.models.hf_config import load_config
from probes.models.llama import LlamaShape
from probes.models.nanogpt_config import read_settings
from probes.models.stated_settings import StatedSetting, StatedSettings
from probes.reference.baseline import baseline_from_data
from probes.reference.like_settings import Given, LikeJob, LikeJobError, check_gpus, resolve, setting_lines, shape_for
from probes.sensors.process_facts import DistEnv
from tui import cli
from tui.commands.probe import format_probe_report

H200 = REPO / "tests" / "fixtures" / "h200"
# The assignments of nanoGPT's train.py (karpathy/nanoGPT 3adf61e) that the probe's step depends on, with the two
# that are no literal (the accumulation steps and the dtype), in its order, up to where it runs configurator.py.
NANOGPT_TRAIN_PY = """import torch
out_dir = 'out'
init_from = 'scratch'
dataset = 'openwebtext'
gradient_accumulation_steps = 5 * 8
batch_size = 12
block_size = 1024
n_layer = 12
n_head = 12
n_embd = 768
dropout = 0.0
bias = False
device = 'cuda'
dtype = 'bfloat16' if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else 'float16'
compile = True
config_keys = [k for k,v in globals().items() if not k.startswith('_') and isinstance(v, (int, float, bool, str))]
exec(open('configurator.py').read())
if ddp:
    gradient_accumulation_steps //= ddp_world_size
"""
DTYPE_LINE = ("train.py: dtype = 'bfloat16' if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "
              "'float16'")[:89] + "… (bf16 where the GPU has it, else fp16)"


def gpt2xl_config() -> str:
    """config/h200_xl.py of the H200 GPT-2 XL run, as its log prints it (configurator.py echoes a config file)."""
    log = (H200 / "gpt2xl_train.log").read_text(encoding="utf-8")
    return log.split("Overriding config with config/h200_xl.py:\n", 1)[1].split("\n\n", 1)[0] + "\n"


@pytest.fixture
def nanogpt(tmp_path):
    (tmp_path / "train.py").write_text(NANOGPT_TRAIN_PY, encoding="utf-8")
    (tmp_path / "configurator.py").write_text("", encoding="utf-8")
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "h200_xl.py").write_text(gpt2xl_config(), encoding="utf-8")
    return tmp_path


def as_table(settings: StatedSettings) -> dict[str, tuple[object, str]]:
    return {s.name: (s.value, s.source) for s in settings.settings}


def test_the_gpt2_xl_run_on_the_h200_read_from_its_command_line_config_and_log(nanogpt):
    log = (H200 / "gpt2xl_train.log").read_text(encoding="utf-8")
    settings = read_settings(["python3", "train.py", "config/h200_xl.py"], str(nanogpt), log)
    assert settings.reader == "nanoGPT's train.py"
    assert as_table(settings) == {
        "n_layer": (48, "config/h200_xl.py: n_layer = 48"),
        "n_head": (25, "config/h200_xl.py: n_head = 25"),
        "n_embd": (1600, "config/h200_xl.py: n_embd = 1600"),
        # the log's "defaulting to vocab_size of GPT-2 to 50304": no meta.pkl, as here
        "vocab_size": (50304, "train.py's 50304: data/synth_gpt2/meta.pkl does not exist (dataset from "
                              "config/h200_xl.py: dataset = 'synth_gpt2')"),
        "bias": (False, "train.py: bias = False"),
        "block_size": (1024, "config/h200_xl.py: block_size = 1024"),
        "batch_size": (16, "config/h200_xl.py: batch_size = 16"),
        "grad_accum": (8, "config/h200_xl.py: gradient_accumulation_steps = 8"),
        "dtype": ("auto", DTYPE_LINE),
        "compile": (True, "train.py: compile = True"),
    }


def test_train_py_defaults_an_override_and_ddp_dividing_the_accumulation(nanogpt):
    argv = ["torchrun", "--nproc_per_node=8", "train.py", "--batch_size=8", "--compile=False", "--device=cpu"]
    table = as_table(read_settings(argv, str(nanogpt), world_size=8))
    assert table["batch_size"] == (8, "--batch_size=8 on its command line")
    assert table["grad_accum"] == (5, "train.py: gradient_accumulation_steps = 5 * 8, ÷ 8 ranks: train.py divides it "
                                      "by WORLD_SIZE under DDP")
    assert table["compile"] == (False, "--compile=False on its command line")
    assert table["dtype"] == ("fp32", "--device=cpu on its command line: train.py runs there without autocast, in fp32")
    assert table["n_layer"] == (12, "train.py: n_layer = 12")
    # the accumulation must divide among the ranks, as train.py asserts
    assert read_settings(argv, str(nanogpt), world_size=3).get("grad_accum").value is None


def test_what_a_config_file_sets_in_a_way_gputop_does_not_follow_is_not_read(nanogpt):
    (nanogpt / "config" / "odd.py").write_text(
        "base = 4\nbatch_size = base * 2\nif base > 2:\n    block_size = 2048\ndtype = 'float16'\n"
        "def helper():\n    n_layer = 99\n", encoding="utf-8")
    (nanogpt / "data" / "openwebtext").mkdir(parents=True)
    (nanogpt / "data" / "openwebtext" / "meta.pkl").write_bytes(b"not opened")
    settings = read_settings(["python", "train.py", "config/odd.py"], str(nanogpt))
    table = as_table(settings)
    assert table["batch_size"] == (None, "config/odd.py: batch_size = base * 2, an expression gputop does not "
                                         "evaluate")
    assert table["block_size"] == (None, "config/odd.py line 3: if base > 2:, inside a statement gputop does not "
                                         "follow")
    missing = read_settings(["python", "train.py", "config/gone.py"], str(nanogpt)).get("batch_size")
    assert missing.value is None and missing.source == "config/gone.py could not be read (No such file or directory)"
    assert table["dtype"] == ("fp16", "config/odd.py: dtype = 'float16'")
    assert table["n_layer"] == (12, "train.py: n_layer = 12")  # a function's local is no global
    assert table["vocab_size"] == (None, "data/openwebtext/meta.pkl holds it, a pickle gputop does not open, and its "
                                         "log has no 'number of parameters' line")


def test_init_from_a_checkpoint_or_gpt2(nanogpt):
    resume = read_settings(["python", "train.py", "--init_from='resume'"], str(nanogpt))
    assert resume.get("n_layer").value is None
    assert resume.get("n_layer").source == ("--init_from='resume' on its command line: the shape comes from the "
                                            "checkpoint in out_dir (ckpt.pt), which gputop does not open")
    xl = as_table(read_settings(["python", "train.py", "--init_from='gpt2-xl'", "--block_size=2048"], str(nanogpt)))
    said = "--init_from='gpt2-xl' on its command line: GPT.from_pretrained's gpt2-xl shape"
    assert {name: xl[name] for name in ("n_layer", "n_head", "n_embd", "vocab_size", "bias")} == {
        "n_layer": (48, said), "n_head": (25, said), "n_embd": (1600, said), "vocab_size": (50257, said),
        "bias": (True, said)}
    assert xl["block_size"] == (1024, "--init_from='gpt2-xl' on its command line: gpt2-xl's 1024 positions")


LLAMA = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 128}


def test_a_hugging_face_job_states_its_batch_accumulation_precision_and_compile(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps(LLAMA), encoding="utf-8")
    path = str(tmp_path / "model" / "config.json")
    argv = ["python", "train.py", "--model_name_or_path", "model", "--per_device_train_batch_size", "4",
            "--gradient_accumulation_steps=8", "--bf16", "--max_seq_length", "64", "--torch_compile", "False"]
    settings = read_job_settings(argv, str(tmp_path))  # nanoGPT's reader passes: no train.py with configurator.py
    assert settings.reader == "a Hugging Face config.json"
    assert as_table(settings) == {
        "model": (path, "--model_name_or_path model on its command line"),
        "block_size": (64, "--max_seq_length 64 on its command line"),
        "batch_size": (4, "--per_device_train_batch_size 4 on its command line"),
        "grad_accum": (8, "--gradient_accumulation_steps 8 on its command line"),
        "dtype": ("bf16", "--bf16 on its command line"),
        "compile": (False, "--torch_compile False on its command line"),
    }
    bare = as_table(hf_settings(["python", "train.py", "model"], str(tmp_path)))
    assert bare["block_size"] == (None, "its command line states no sequence length (--block_size, --max_seq_length, "
                                        "--max_seq_len, ...); the config's 128 is the longest it takes, not "
                                        "necessarily the one it trains at")
    assert bare["batch_size"] == (None, "its command line has no --per_device_train_batch_size or "
                                        "--per_gpu_train_batch_size")
    assert bare["dtype"] == (None, "its command line has no --bf16, --fp16 or --mixed_precision")
    accelerate = hf_settings(["accelerate", "launch", "--mixed_precision", "fp16", "train.py", "model"], str(tmp_path))
    assert accelerate.get("dtype").value == "fp16"
    settings = resolve(1, settings, {})
    assert shape_for(settings) == LlamaShape(**{**load_config(path).__dict__, "seq_len": 64})


def stated_nanogpt(**unread: str) -> StatedSettings:
    values = {"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 256, "bias": False, "block_size": 32,
              "batch_size": 8, "grad_accum": 2, "dtype": "fp32", "compile": False}
    return StatedSettings("nanoGPT's train.py", tuple(
        StatedSetting(name, None, unread[name]) if name in unread else StatedSetting(name, value, f"--{name}={value}")
        for name, value in values.items()))


def test_a_setting_the_job_does_not_state_stops_the_probe_with_the_flags_to_pass():
    stated = stated_nanogpt(dtype="dtype is not set in train.py, a config file or an override",
                            bias="bias is not set in train.py, a config file or an override")
    with pytest.raises(LikeJobError) as error:
        resolve(4242, stated, {})
    assert str(error.value) == (
        "cannot time PID 4242's step at its own settings: bias is not set in train.py, a config file or an override; "
        "dtype is not set in train.py, a config file or an override. Pass --bias or --no-bias, --dtype")
    settings = resolve(4242, stated, {"dtype": Given("fp32", "--dtype fp32"), "bias": Given(False, "--no-bias"),
                                      "batch_size": Given(4, "--batch-size 4")})
    table = {s.name: (s.value, s.source) for s in settings}
    assert table["dtype"] == ("fp32", "--dtype fp32 given (the job's: not read: dtype is not set in train.py, a "
                                      "config file or an override)")
    assert table["batch_size"] == (4, "--batch-size 4 given (the job's: 8, --batch_size=8)")
    assert table["n_layer"] == (2, "--n_layer=2")
    assert shape_for(settings) == GptShape(2, 2, 32, 32, 256, False)


def test_a_model_given_replaces_the_jobs_and_keeps_its_sequence_length():
    settings = resolve(1, stated_nanogpt(n_layer="not read"), {"model": Given("gpt2-xl", "--model gpt2-xl")})
    assert settings[0].name == "model" and "n_layer" not in {s.name for s in settings}
    assert shape_for(settings) == GptShape(48, 25, 1600, 32, 50304, False)
    with pytest.raises(LikeJobError, match=r"^--model must be a preset"):
        shape_for(resolve(1, stated_nanogpt(), {"model": Given("gpt9", "--model gpt9")}))
    like = LikeJob(pid=1, command="python train.py", reader="nanoGPT's train.py", settings=settings,
                   gpu_check="GPUs not checked: no NVIDIA driver", given=("--model gpt2-xl",))
    assert setting_lines(like)[:2] == ["like PID 1 (python train.py), read as nanoGPT's train.py:",
                                       "  model       gpt2-xl  --model gpt2-xl given"]
    assert setting_lines(like)[-1] == "  GPU check   GPUs not checked: no NVIDIA driver"


def two_gpus(*job_pids_on: tuple[int, ...]) -> GpuReading:
    return GpuReading(available=True, devices=tuple(
        GpuDevice(index=index, processes=tuple(GpuProcess(pid=pid, in_target=True, local_pid=pid) for pid in pids))
        for index, pids in enumerate(job_pids_on)))


def test_the_probe_refuses_the_gpu_the_job_runs_on_and_names_a_free_one():
    check = check_gpus(two_gpus((4242,), ()), {4242: DistEnv()}, 4242, "auto", None)
    assert check.refusal == ("GPU 0 is running PID 4242 (the job): a reference timed beside it measures neither; "
                             "stop the job or pass CUDA_VISIBLE_DEVICES=1")
    fine = check_gpus(two_gpus((4242,), ()), {4242: DistEnv()}, 4242, "auto", "1")
    assert fine.refusal is None and fine.words == "the job's GPU: 0; the probe's: GPU 1 (CUDA_VISIBLE_DEVICES=1)"
    everywhere = check_gpus(two_gpus((4243,), (4244,)), {}, 4242, "cuda:1", None)
    assert everywhere.refusal == ("GPU 1 is running PID 4244 (the job of PID 4242): a reference timed beside it "
                                  "measures neither; stop the job: it uses every GPU NVML lists here")
    assert check_gpus(two_gpus((4242,), ()), {}, 4242, "cpu", None).refusal is None


def test_without_nvml_a_ranks_environment_names_its_gpu():
    no_nvml = GpuReading(available=False, reason="NVML library not found")
    ranks = {11: DistEnv(rank=0, local_rank=0, cuda_visible_devices="0,1"),
             12: DistEnv(rank=1, local_rank=1, cuda_visible_devices="0,1")}
    check = check_gpus(no_nvml, ranks, 10, "auto", "1")
    assert check.refusal == ("GPU 1 is the job's: PID 12's environment sets CUDA_VISIBLE_DEVICES=0,1, LOCAL_RANK=1: a "
                             "reference timed beside it measures neither; stop the job or set CUDA_VISIBLE_DEVICES to "
                             "a GPU it does not use")
    unknown = check_gpus(no_nvml, {10: DistEnv()}, 10, "auto", None)
    assert unknown.refusal is None and unknown.words == "GPUs not checked: NVML library not found"


def one_line_exit_2(argv, capsys) -> str:
    assert cli.run(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    return lines[0]


def test_a_pid_that_is_no_process_or_no_job_is_one_line(capsys):
    assert one_line_exit_2(["probe", "--like", "99999999"], capsys) == (
        "gputop: no process 99999999 here: --like takes the PID of a running training job")
    line = one_line_exit_2(["probe", "--like", str(os.getpid())], capsys)  # pytest: neither nanoGPT nor a config.json
    assert line.startswith(f"gputop: PID {os.getpid()} (") and line.endswith(
        "is not a job whose settings gputop can read: neither nanoGPT's train.py (configurator.py beside it) nor a "
        "Hugging Face config.json is on its command line; time the reference with --model and --batch-size instead "
        "of --like")


def test_the_result_carries_the_jobs_settings_into_its_report_and_its_json():
    like = LikeJob(pid=4242, command="python3 train.py config/h200_xl.py", reader="nanoGPT's train.py",
                   settings=(StatedSetting("batch_size", 16, "config/h200_xl.py: batch_size = 16"),),
                   gpu_check="the job's GPU: 0; the probe's: GPU 1 (CUDA_VISIBLE_DEVICES=1)", given=("--dtype bf16",))
    result = xl_probe_on_h200(like=like)
    rows = format_probe_report(result)
    assert rows[2] == ("like            PID 4242 (python3 train.py config/h200_xl.py): its settings, read from "
                       "nanoGPT's train.py; given: --dtype bf16")
    assert rows[3] == "GPU check       the job's GPU: 0; the probe's: GPU 1 (CUDA_VISIBLE_DEVICES=1)"
    written = json.loads(json.dumps(dataclasses.asdict(result)))
    assert written["like"]["settings"] == [{"name": "batch_size", "value": 16,
                                            "source": "config/h200_xl.py: batch_size = 16"}]
    assert baseline_from_data(written, "probe.json").like == like  # a baseline keeps where its settings came from
