"""probes/pace.py, the pace's one rule, on step lines and printed figures noted at given times: the counter's rate
over the window from two lines on, what the window holds, and when a printed figure is said to disagree (the live
cases are tests/test_pace_rule_e2e.py)."""

from __future__ import annotations

import pytest

from probes.pace import (
    BAR_RATE,
    PACE_WINDOW_S,
    STEP_COUNTER,
    PaceFigures,
    StepPace,
    disagreement_words,
)


def noted(lines: list[tuple[float, int, float | None]], derived_from: str | None = None,
          bar: bool = False) -> StepPace:
    """A StepPace given (time, step, printed seconds or None) lines in order."""
    pace = StepPace()
    for when, step, printed in lines:
        if printed is not None:
            pace.note_printed(printed, derived_from, when, bar=bar)
        pace.note_step(step, when)
    return pace


def test_nothing_noted_gives_nothing():
    assert StepPace().figures() == PaceFigures()


def test_one_line_gives_its_printed_figure_and_two_give_the_counter():
    one = noted([(0.0, 10, 0.1)], derived_from="wpb / wps")
    assert one.figures() == PaceFigures(0.1, "wpb / wps")
    two = noted([(0.0, 10, 0.1), (3.0, 11, 0.1)], derived_from="wpb / wps")
    assert two.figures() == PaceFigures(3.0, STEP_COUNTER)  # one interval: no claim yet


def test_the_window_follows_a_change_of_pace():
    """Steps of 1 s for two minutes, then of 2 s for a little over the window: the pace is the new one, not a
    mean since the start."""
    lines = [(float(t), t, None) for t in range(121)]
    lines += [(120.0 + 2 * k, 120 + k, None) for k in range(1, int(PACE_WINDOW_S / 2) + 2)]
    assert noted(lines).figures().seconds_per_iter == pytest.approx(2.0)


def test_a_step_seen_again_is_no_new_sighting():
    """litgpt's finetune prints every micro-batch with the optimizer step it is in: step 3 printed at 0 s and again
    at 0.75 s was reached at 0 s, and step 4 at 1 s is one step in 1 s."""
    pace = noted([(0.0, 3, None), (0.75, 3, None), (1.0, 4, None)])
    assert pace.figures().seconds_per_iter == pytest.approx(1.0)


def test_lines_read_at_one_time_count_as_their_newest_step():
    pace = noted([(0.0, 1, None), (5.0, 2, None), (5.0, 3, None), (5.0, 6, None)])
    assert pace.figures().seconds_per_iter == pytest.approx(1.0)


def test_a_restart_forgets_the_steps_before_it():
    pace = noted([(0.0, 100, None), (10.0, 110, None)])
    pace.restart()
    pace.note_step(0, 20.0)
    pace.note_step(1, 24.0)
    assert pace.figures().seconds_per_iter == pytest.approx(4.0)


def test_a_step_below_the_last_starts_the_counter_again():
    pace = noted([(0.0, 100, None), (10.0, 110, None), (20.0, 0, None), (23.0, 1, None)])
    assert pace.figures().seconds_per_iter == pytest.approx(3.0)


def test_a_disagreement_is_the_printed_mean_over_the_counted_lines():
    """A micro-step's 100 ms printed each step of 2 s: claimed, with the mean of the lines the counter spans (the
    first line's figure is outside it: it times a step before the window)."""
    pace = noted([(0.0, 0, 9.0), (2.0, 1, 0.1), (4.0, 2, 0.1), (6.0, 3, 0.1)])
    assert pace.figures() == PaceFigures(2.0, STEP_COUNTER, pytest.approx(0.1), None)


def test_alternating_printed_times_that_average_to_the_counter_claim_nothing():
    lines, at = [(0.0, 0, None)], 0.0
    for step in range(1, 21):
        took = 1.1 if step % 2 else 0.09
        at += took
        lines.append((at, step, took))
    figures = noted(lines).figures()
    assert figures.seconds_per_iter == pytest.approx(at / 20)
    assert figures.printed_seconds_per_iter is None


def test_a_bar_rate_disagreeing_is_named_as_the_bar_s():
    lines = [(0.0, 0, None)] + [(1.5 * k, 10 * k, 0.085) for k in range(1, 6)]
    figures = noted(lines, bar=True).figures()
    assert (figures.seconds_per_iter, figures.printed_from) == (pytest.approx(0.15), BAR_RATE)
    assert disagreement_words(figures.printed_seconds_per_iter, figures.seconds_per_iter, figures.printed_from) == (
        "the bar's own rate averages 85 ms/step over the window, but the step counter moved every 0.15 s (1.8× "
        "longer): a bar's rate is its own moving average, weighted to its latest updates; the pace is the counter's")


def test_memory_is_bounded_whatever_the_log_prints():
    pace = StepPace()
    for step in range(20_000):
        pace.note_printed(0.001, None, step * 0.001)
        pace.note_step(step, step * 0.001)
    assert len(pace._sightings) <= 4096 and len(pace._printed) <= 4096
    assert pace.figures().seconds_per_iter == pytest.approx(0.001)
