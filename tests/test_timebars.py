"""Where a run's time went (`cascade.ui.timebars`): the segments' seconds add up to the run's time (its scoring
apart, after it), the big model alone's bar is measured or estimated and says which, and a run without a Summary
draws nothing. Also the engine's record the picture reads: each model's seconds spent reading (`Work.reading_s`)."""

from __future__ import annotations

import dataclasses

import pytest

from cascade.engine.events import ModelStats, Quality, Work
from cascade.ui import timebars
from cascade.ui.run import Run, verdict
from cascade.ui.timebars import ALONE, THIS_RUN

from .helpers import engine_for, run
from .recorded import summary

WORK = Work(draft=ModelStats(calls=70, seconds=2.1), target=ModelStats(calls=14, seconds=3.9),
            reading_s={"draft": 0.4, "target": 1.5})
SHARED = summary(wall=6.4, work=WORK, quality=Quality(text_ppl_by_target=4.2, target_agreement=0.7, scoring_s=1.2))
ALONE_RUN = summary(policy="target", by_target=80, wall=9.0, work=Work(target=ModelStats(calls=80, seconds=8.6),
                                                                       reading_s={"draft": 0.0, "target": 0.9}))


def seconds(found, bar=THIS_RUN) -> dict[str, float]:
    return {s.part: pytest.approx(s.seconds) for s in found if s.bar == bar}


def total(found, bar=THIS_RUN) -> float:
    return sum(s.seconds for s in found if s.bar == bar)


def test_the_runs_segments_add_up_to_its_time_and_the_scoring_comes_after_it():
    found = timebars.segments(SHARED)
    assert [s.part for s in found] == ["small", "reading", "writing", "choosing", "scoring"]
    assert seconds(found) == {"small": 2.1, "reading": 1.5, "writing": 2.4, "choosing": 0.4, "scoring": 1.2}
    assert total(found) == pytest.approx(SHARED.timings.wall_s + 1.2)
    assert sum(s.seconds for s in found if s.part != "scoring") == pytest.approx(SHARED.timings.wall_s)
    assert {s.bar for s in found} == {THIS_RUN}  # nothing known of the big model alone: no bar for it


def test_without_scoring_there_is_no_scoring_segment():
    found = timebars.segments(dataclasses.replace(SHARED, quality=None))
    assert "scoring" not in {s.part for s in found}
    assert total(found) == pytest.approx(SHARED.timings.wall_s)


def test_the_big_model_alone_estimated_is_one_segment_that_says_so():
    found = timebars.segments(SHARED, estimate_s=9.1)
    assert [(s.part, s.seconds) for s in found if s.bar == ALONE] == [("estimated", 9.1)]
    spec = timebars.figure_spec(SHARED, estimate_s=9.1)
    (estimated,) = [t for t in spec["data"] if t["meta"] == "estimated"]
    assert "estimated" in estimated["name"] and estimated["marker"]["pattern"]["shape"] == "/"
    assert "Compare" in estimated["customdata"][0][1]
    assert spec["layout"]["yaxis"]["ticktext"] == [f"{THIS_RUN}<br>6.4 s", f"{ALONE}<br>about 9.1 s"]


def test_the_big_model_alone_measured_is_split_the_same_way_and_replaces_the_estimate():
    found = timebars.segments(SHARED, comparison=ALONE_RUN, estimate_s=9.1)
    assert seconds(found, ALONE) == {"reading": 0.9, "writing": 7.7, "choosing": 0.4}
    assert total(found, ALONE) == pytest.approx(ALONE_RUN.timings.wall_s)
    spec = timebars.figure_spec(SHARED, ALONE_RUN, 9.1)
    assert spec["layout"]["yaxis"]["categoryarray"] == [THIS_RUN, ALONE]  # this run on top
    assert spec["layout"]["yaxis"]["ticktext"][1] == f"{ALONE}<br>9.0 s"


def test_each_segment_hovers_its_seconds_in_words_and_the_colours_say_who():
    spec = timebars.figure_spec(SHARED, ALONE_RUN)
    by_part = {t["meta"]: t for t in spec["data"]}
    seconds_shown = {part: [c[0] for c in trace["customdata"]] for part, trace in by_part.items()}
    assert seconds_shown["reading"] == ["1.5 s", "0.90 s"] and seconds_shown["small"] == ["2.1 s"]
    said = {part: [c[1].replace("<br>", " ") for c in trace["customdata"]] for part, trace in by_part.items()}
    assert "writes the token after them" in said["reading"][0] and "not part of its time" in said["scoring"][0]
    assert "choosing which model" in said["choosing"][0] and "choosing" not in said["choosing"][1]  # alone: none
    assert by_part["writing"]["marker"]["color"] == "#c62828"  # the big model's red
    assert len({t["marker"]["color"] for t in spec["data"]}) == len(spec["data"])
    assert spec["layout"]["xaxis"]["ticksuffix"] == " s" and spec["layout"]["barmode"] == "stack"
    assert 160 <= spec["layout"]["height"] <= 200


def test_a_run_of_the_big_model_alone_has_one_bar_split_into_reading_and_writing():
    found = timebars.segments(ALONE_RUN, estimate_s=9.5)
    assert {s.bar for s in found} == {THIS_RUN} and "small" not in {s.part for s in found}
    assert seconds(found) == {"reading": 0.9, "writing": 7.7, "choosing": 0.4}


def test_a_run_that_did_not_record_its_reading_shows_the_big_model_whole():
    old = dataclasses.replace(SHARED, work=Work(draft=WORK.draft, target=WORK.target))  # an older run's record
    assert seconds(timebars.segments(old))["big"] == pytest.approx(3.9)


def test_a_run_with_no_tokens_still_shows_its_time_and_a_stopped_run_draws_nothing():
    empty = summary(n=0, by_target=0, wall=0.31, work=Work(draft=ModelStats(seconds=0.1),
                                                           target=ModelStats(seconds=0.2), reading_s={"target": 0.2}))
    found = timebars.segments(empty)
    assert seconds(found) == {"small": 0.1, "reading": 0.2, "choosing": 0.01}
    assert timebars.segments(None) == [] and timebars.figure(None) is None
    stopped = Run("a prompt", run_config(), events=(), summary=None, running=False)
    update = verdict(stopped)
    assert update.timebars["visible"] is False and update.more_box["visible"] is False and update.more == ""
    assert verdict(None).timebars["visible"] is False


def test_a_finished_run_shows_its_picture_and_the_details_in_the_fold():
    finished = Run("a prompt", run_config(), summary=SHARED, running=False, alone_estimate_s=9.1)
    update = verdict(finished)
    assert update.timebars["visible"] is True and update.more_box["visible"] is True
    assert [t.meta for t in update.timebars["value"].data][-1] == "estimated"
    assert "Speed:" in update.more and "scored the finished answer" in update.more


def run_config():
    from cascade.engine.config import GenerationConfig

    return GenerationConfig(chat=False)


def test_the_engine_records_each_models_reading_time_the_rest_its_writing(toy):
    _, s = run(engine_for(toy.small, toy.related), "The cat sat on the mat", policy="speculative", k=4,
               max_tokens=16, temperature=0.0)
    work = s.work
    assert set(work.reading_s) == {"draft", "target"}
    reading, writing = work.split("target")
    assert 0 < reading <= work.target.seconds and reading + writing == pytest.approx(work.target.seconds)
    assert work.to_dict()["reading_s"] == work.reading_s
    # The picture's bar of this run: every second of the run in exactly one segment.
    found = timebars.segments(dataclasses.replace(s, quality=None))
    assert total(found) == pytest.approx(s.timings.wall_s)
