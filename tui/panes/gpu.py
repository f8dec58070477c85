"""The GPU pane: each GPU, the target's first. SM clock against max and power against limit as bars,
utilisation, GPM metrics when the driver has them, memory, temperature, why clocks are held (in words),
and sparklines of the last minute. Without a GPU it shrinks to one line saying why."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Static

from probes.frame import Frame, GpuDevice
from probes.view.panes import GPM_METRICS, PANE_LINES, GpmMetric
from tui.panes.text import bar, node_title, percent, size, sparkline

TITLE = "2 GPU"
SPARKLINE_WINDOW_S = 60.0
SPARKLINE_WIDTH = 15
BAR_WIDTH = 12

CLOCK_EVENT_WORDS = {
    "gpu_idle": "idle (nothing running)",
    "applications_clocks_setting": "application clock setting",
    "sw_power_cap": "software power cap",
    "hw_slowdown": "hardware slowdown",
    "sync_boost": "sync boost",
    "sw_thermal_slowdown": "software thermal slowdown",
    "hw_thermal_slowdown": "hardware thermal slowdown (too hot)",
    "hw_power_brake_slowdown": "power brake (external)",
    "display_clock_setting": "display clock setting",
    "board_limit": "board limit",
    "reliability": "reliability limit",
}


def clock_event_words(reasons: Sequence[str]) -> str:
    return ", ".join(CLOCK_EVENT_WORDS.get(r, r.replace("_", " ")) for r in reasons)


def ordered_devices(devices: Sequence[GpuDevice]) -> list[GpuDevice]:
    """The target's GPUs first, then the rest, each group by index."""
    return sorted(devices, key=lambda d: (not d.in_target, d.index))


def device_history(frames: Sequence[Frame], device: GpuDevice, window_s: float) -> list[GpuDevice]:
    """This device's readings over the last `window_s` seconds of frames (matched by UUID, else index)."""
    if not frames:
        return []
    cutoff = frames[-1].time - window_s
    found = []
    for frame in frames:
        if frame.time < cutoff or not frame.gpu.available:
            continue
        for candidate in frame.gpu.devices:
            same = candidate.uuid == device.uuid if device.uuid else candidate.index == device.index
            if same:
                found.append(candidate)
                break
    return found


def _name(device: GpuDevice) -> str:
    return (device.name or "GPU").removeprefix("NVIDIA ")


def _memory(device: GpuDevice) -> str:
    if device.mem_used_bytes is None:
        return "mem -"
    total = f"/{size(device.mem_total_bytes)}" if device.mem_total_bytes else ""
    return f"mem {size(device.mem_used_bytes)}{total}"


def _temperature(device: GpuDevice) -> str:
    return "-°C" if device.temperature_c is None else f"{device.temperature_c:.0f}°C"


def _gpm_value(metric: GpmMetric, value: float) -> str:
    return percent(value) if metric.unit == "percent" else f"{size(value)}/s"


def device_text(device: GpuDevice, history: Sequence[GpuDevice]) -> Text:
    """A target GPU in full: two to eight lines (clock reasons, GPM metrics and sparklines where there are some)."""
    text = Text()
    text.append(f"GPU{device.index} {_name(device)}", style="bold")
    if device.in_target:
        text.append(" [target]", style="bold cyan")
    text.append(f"  util {percent(device.util_gpu_pct)}  {_memory(device)}  {_temperature(device)}")
    text.append("\n SM clock ")
    text.append_text(bar(device.sm_clock_mhz, device.max_sm_clock_mhz, BAR_WIDTH))
    clock = "-" if device.sm_clock_mhz is None else str(device.sm_clock_mhz)
    text.append(f" {clock}/{device.max_sm_clock_mhz or '-'} MHz  power ")
    text.append_text(bar(device.power_w, device.power_limit_w, BAR_WIDTH))
    power = "-" if device.power_w is None else f"{device.power_w:.0f}"
    limit = "-" if device.power_limit_w is None else f"{device.power_limit_w:.0f}"
    text.append(f" {power}/{limit} W")
    if device.clock_event_reasons:
        text.append("\n clocks held by: ", style="dim")
        worrying = set(device.clock_event_reasons) - {"gpu_idle", "applications_clocks_setting"}
        text.append(clock_event_words(device.clock_event_reasons), style="bold yellow" if worrying else "")
    for pane_line in PANE_LINES:
        shown = [f"{metric.label} {_gpm_value(metric, value)}" for metric in GPM_METRICS
                 if metric.pane_line == pane_line and (value := getattr(device, metric.field)) is not None]
        if shown:  # a line only where the GPU gives one of its metrics: a GPU without GPM shows none
            text.append(f"\n {pane_line}: ", style="dim")
            text.append(" · ".join(shown))
    if len(history) > 1:
        text.append("\n last min ", style="dim")
        text.append("SM ", style="dim")
        text.append(sparkline([d.sm_clock_mhz for d in history], SPARKLINE_WIDTH, device.max_sm_clock_mhz),
                    style="green")
        text.append(" power ", style="dim")
        text.append(sparkline([d.power_w for d in history], SPARKLINE_WIDTH, device.power_limit_w),
                    style="yellow")
        text.append(" util ", style="dim")
        text.append(sparkline([d.util_gpu_pct for d in history], SPARKLINE_WIDTH, 100.0), style="cyan")
    return text


def other_device_text(device: GpuDevice) -> Text:
    """A GPU the target does not use: one line."""
    power = "-" if device.power_w is None else f"{device.power_w:.0f} W"
    return Text(f"GPU{device.index} {_name(device)}  util {percent(device.util_gpu_pct)}  {_memory(device)}  "
                f"{_temperature(device)}  {power}  (not the target's)", style="dim")


def gpu_text(frames: Sequence[Frame]) -> Text:
    frame = frames[-1]
    if not frame.gpu.available:
        return Text.assemble(("GPU ", "bold"), ("none: ", "dim"), frame.gpu.reason or "no GPU found")
    devices = ordered_devices(frame.gpu.devices)
    if not devices:
        return Text.assemble(("GPU ", "bold"), ("none: ", "dim"), frame.gpu.reason or "the driver lists no GPU")
    uses_any = any(d.in_target for d in devices)
    parts = []
    for device in devices:
        if device.in_target or not uses_any:
            parts.append(device_text(device, device_history(frames, device, SPARKLINE_WINDOW_S)))
        else:
            parts.append(other_device_text(device))
    if not uses_any:
        parts.insert(0, Text("the target has no process on any GPU (yet)", style="dim"))
    if frame.gpu.reason:
        parts.append(Text(frame.gpu.reason, style="dim"))
    return Text("\n").join(parts)


class GpuPane(VerticalScroll):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j", "scroll_down", "Scroll down", show=False),
        Binding("k", "scroll_up", "Scroll up", show=False),
    ]

    def __init__(self) -> None:
        super().__init__(id="gpu", classes="pane")
        self.border_title = TITLE
        self._shown: Text | None = None

    def compose(self):
        yield Static(id="gpu-text")

    def show_waiting(self, message: str) -> None:
        self.query_one("#gpu-text", Static).update(Text(message, style="dim"))

    def show(self, frames: Sequence[Frame]) -> None:
        available = frames[-1].gpu.available and bool(frames[-1].gpu.devices)
        self.border_title = node_title(TITLE, frames[-1])
        # Without a GPU the pane is one line and cannot take focus, so its room goes to CPU and stacks.
        self.set_class(not available, "-no-gpu")
        self.can_focus = available
        text = gpu_text(frames)
        if text != self._shown:
            self._shown = text
            self.query_one("#gpu-text", Static).update(text)
