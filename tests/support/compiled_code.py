"""torch.compile's code as py-spy showed it (probes/diagnosis/stacks.py tells running compiled code from compiling):
Inductor's generated wrapper of a backward graph, Triton's launcher under it on the H200, Dynamo compiling a frame,
and an eager optimizer step under torch._disable_dynamo's wrapper."""

from __future__ import annotations

from probes.frame import StackFrame

# A CPU loop over torch.compile(model) on torch 2.13, `py-spy dump --json`: Inductor's generated wrapper of the
# backward graph, at the top of its main thread (the real paths; site-packages shortened to SITE).
SITE = "/work/main/.venv/lib/python3.11/site-packages/"
HASH = "czn2vzooio72hw4sy22fcy7nozvagesiyrbn6zwh7ripxdb6jgds"
GENERATED = StackFrame("Runner.call", f"/tmp/torchinductor_root/zn/{HASH}.py", 224)
COMPILED_BACKWARD = (
    GENERATED,
    StackFrame("CompiledFxGraph.__call__", SITE + "torch/_inductor/output_code.py", 763),
    StackFrame("DisableContext.__call__.<locals>._fn", SITE + "torch/_dynamo/eval_frame.py", 1446),
    StackFrame("call_func_at_runtime_with_args", SITE + "torch/_functorch/_aot_autograd/utils.py", 126),
    StackFrame("_AOTDispatchAutogradFunctionFactory.build.<locals>.CompiledFunction._backward_impl",
               SITE + "torch/_functorch/_aot_autograd/runtime_wrappers.py", 3551),
    StackFrame("BackwardCFunction.apply_boxed", SITE + "torch/autograd/function.py", 333),
    StackFrame("_engine_run_backward", SITE + "torch/autograd/graph.py", 979),
    StackFrame("Tensor.backward", SITE + "torch/_tensor.py", 623),
    StackFrame("train_step", "/home/alice/compiled_train.py", 16),
    StackFrame("<module>", "/home/alice/compiled_train.py", 40),
)
# The H200 run (tests/fixtures/h200/gpt2xl_s2): Triton's launcher under Inductor's generated code.
TRITON_LAUNCH = (
    StackFrame("StaticallyLaunchedTritonKernel.run", SITE + "torch/_inductor/runtime/static_triton_launcher.py", 300),
    StackFrame("launcher", "<string>", 5),
    StackFrame("CachingAutotuner.run", SITE + "torch/_inductor/runtime/triton_heuristics.py", 1400),
    StackFrame("Runner.call", "/tmp/torchinductor_root/bl/cblfrorbxo7l6llc3cvoocbwpwrqpzi2c6rgwydy556clc7kev6v.py",
               900),
    StackFrame("CompiledFxGraph.__call__", SITE + "torch/_inductor/output_code.py", 763),
    StackFrame("<module>", "/home/user/nanoGPT/train.py", 305),
)
COMPILING = (
    StackFrame("InstructionTranslatorBase.run", SITE + "torch/_dynamo/symbolic_convert.py", 1950),
    StackFrame("_compile", SITE + "torch/_dynamo/convert_frame.py", 2102),
    StackFrame("OptimizedModule.__call__", SITE + "torch/_dynamo/eval_frame.py", 511),
    StackFrame("<module>", "/home/alice/compiled_train.py", 40),
)
# Eager: the optimizer's zero_grad runs under torch._disable_dynamo's wrapper (eval_frame.py) without any compile.
EAGER_ZERO_GRAD = (
    StackFrame("Optimizer.zero_grad", SITE + "torch/optim/optimizer.py", 1057),
    StackFrame("DisableContext.__call__.<locals>._fn", SITE + "torch/_dynamo/eval_frame.py", 1446),
    StackFrame("<module>", "/home/alice/train.py", 16),
)
