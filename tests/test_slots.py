"""Slots: several generations over one pair of models (engine/batching.py). By default the slots take turns, one
call a decode, so every request's tokens, writers and scores are exactly its own alone (test_real_slots.py holds
this on the real pair, where batching breaks it). With `batch_slots` their calls are decoded together; on the toy
models that too gives each sequence's logits alone. The scheduler's own rules are tested on fakes."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from cascade.engine.batching import BACKGROUND, Call, Scheduler
from cascade.engine.config import GenerationConfig, ModelConfig
from cascade.engine.engine import Engine
from cascade.engine.events import Summary, TokenEvent
from cascade.engine.models import load_pair
from cascade.engine.policies import POLICIES

from .helpers import TOY_THREADS, FakeClock, in_thread

PROMPTS = ["The cat sat on the mat", "Once upon a time", "My name is Sam and", "A dog and a cat"]


@pytest.fixture(scope="module")
def slots(toy) -> list[Engine]:
    config = ModelConfig(draft=str(toy.small), target=str(toy.related), n_threads=TOY_THREADS, n_ctx=512, parallel=4)
    return Engine(load_pair(config)).slots()


@pytest.fixture(scope="module")
def batched_slots(toy) -> list[Engine]:
    config = ModelConfig(draft=str(toy.small), target=str(toy.related), n_threads=TOY_THREADS, n_ctx=512, parallel=4,
                         batch_slots=True)
    return Engine(load_pair(config)).slots()


@pytest.fixture(scope="module")
def alone(toy) -> Engine:
    return Engine(load_pair(ModelConfig(draft=str(toy.small), target=str(toy.related), n_threads=TOY_THREADS, n_ctx=512)))


def text(engine: Engine, prompt: str, config: GenerationConfig) -> str:
    *_, summary = engine.generate(prompt, config)
    return summary.text


def written(engine: Engine, prompt: str, config: GenerationConfig) -> tuple[list[tuple], Summary]:
    """Every token event's token, writer, fate and scores (the page's scoring pass included), and the Summary."""
    *events, summary = engine.generate(prompt, config)
    return [(e.token_id, e.source, e.status, e.draft_ppl, e.target_ppl, e.draft_top, e.target_top)
            for e in events if isinstance(e, TokenEvent)], summary


def side_by_side(engines, prompts, config, run=text) -> list:
    out: list = [None] * len(prompts)

    def one(i: int) -> None:
        out[i] = run(engines[i], prompts[i], config)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return out


# auto chooses each round's way of writing by the speeds it measures, so its writers follow the machine's load;
# the seed's loop (the original's, kept for reference) shares one copy of each model among all slots.
BY_TIMING = ("auto", "seed")


@pytest.mark.parametrize("temperature", [0.0, 0.8])
@pytest.mark.parametrize("policy", [p for p in POLICIES if p not in BY_TIMING])
def test_every_policy_writes_each_requests_own_tokens_writers_and_scores_beside_three_others(slots, policy,
                                                                                            temperature):
    """Alone is one request on the same server (slot 0, nobody else writing): the same path as beside others."""
    config = GenerationConfig(policy=policy, max_tokens=24, chat=False, temperature=temperature, seed=3)
    alone = [written(slots[0], p, config) for p in PROMPTS]
    scheduler = slots[0].pair.draft.context.scheduler
    together = side_by_side(slots, PROMPTS, config, run=written)
    assert [events for events, _ in together] == [events for events, _ in alone]
    assert scheduler.batched_calls == 0 and scheduler.writing == 0
    assert all(s.work.draft.shared_calls == s.work.target.shared_calls == 0 for _, s in together)


@pytest.mark.parametrize("policy", BY_TIMING)
def test_the_policies_that_follow_the_clock_still_write_each_requests_own_greedy_text(slots, policy):
    config = GenerationConfig(policy=policy, max_tokens=24, chat=False, temperature=0.0)
    assert side_by_side(slots, PROMPTS, config) == [text(slots[0], p, config) for p in PROMPTS]


@pytest.mark.parametrize("policy", ["target", "cascade", "speculative"])
def test_batched_slots_decode_calls_together_and_on_the_toy_models_still_write_each_text_alone(batched_slots, slots,
                                                                                              policy):
    config = GenerationConfig(policy=policy, max_tokens=24, chat=False, temperature=0.0)
    expected = [text(slots[0], p, config) for p in PROMPTS]
    scheduler = batched_slots[0].pair.draft.context.scheduler
    batched = scheduler.batched_calls
    together = side_by_side(batched_slots, PROMPTS, config, run=written)
    assert [s.text for _, s in together] == expected
    assert scheduler.batched_calls > batched, "no call was decoded beside another slot's"
    assert sum(s.work.target.shared_calls for _, s in together) > 0  # each request says so (usage.cascade)


def test_a_request_joining_mid_batch_is_decoded_at_the_next_step(slots, monkeypatch):
    scheduler = slots[0].pair.draft.context.scheduler
    joined: list[tuple[int, Call]] = []  # (steps done when slot 1's first call came, that call)
    run = scheduler.run

    def watched(call: Call) -> None:
        if call.seq == 1 and not joined:
            joined.append((scheduler.steps, call))
        run(call)

    monkeypatch.setattr(scheduler, "run", watched)
    long_done = threading.Event()

    def long_one() -> None:
        config = GenerationConfig(policy="target", max_tokens=300, chat=False, temperature=0.0)
        for event in slots[0].generate(PROMPTS[0], config, score=False):
            if isinstance(event, TokenEvent) and event.position == 20:
                threading.Thread(target=joining).start()
        long_done.set()

    first_token_while_long_ran: list[bool] = []

    def joining() -> None:
        for event in slots[1].generate(PROMPTS[1], GenerationConfig(policy="target", max_tokens=4, chat=False),
                                       score=False):
            if isinstance(event, TokenEvent) and not first_token_while_long_ran:
                first_token_while_long_ran.append(not long_done.is_set())

    thread = threading.Thread(target=long_one)
    thread.start()
    thread.join(timeout=120)
    (steps_done, first_call), = joined
    # A step may have been running when it came (steps_done + 1); the next one takes it.
    assert first_call.step is not None and first_call.step <= steps_done + 2
    assert first_token_while_long_ran == [True], "the joining request waited for the running one to finish"


def test_one_slot_alone_never_waits_for_the_others(slots):
    scheduler = slots[0].pair.draft.context.scheduler
    before, done = scheduler.steps, []
    # On a clock that never moves, a step that waited for slots not writing would never end.
    scheduler.clock = FakeClock()
    try:
        writing = in_thread(lambda: done.extend(slots[2].generate(
            PROMPTS[2], GenerationConfig(policy="draft", max_tokens=40, chat=False), score=False)))
        writing.join(timeout=60)
    finally:
        scheduler.clock = time.perf_counter
    assert not writing.is_alive(), "a step waited for slots that are not writing"
    assert isinstance(done[-1], Summary) and scheduler.steps - before >= 40


def test_a_slot_stopped_mid_stream_leaves_the_scheduler_at_once(slots):
    scheduler = slots[3].pair.draft.context.scheduler
    events = slots[3].generate(PROMPTS[3], GenerationConfig(policy="cascade", max_tokens=200, chat=False))
    next(events)
    assert scheduler.writing == 1 and slots[3].pair.lock.locked()
    events.close()  # a Stop button, a client that left
    assert scheduler.writing == 0 and not slots[3].pair.lock.locked()


# ---- the scheduler's rules, on fake contexts -----------------------------------------------------------

class FakeContext:
    """Records the batches it is given, and the clock's time at each (`stamps`)."""

    def __init__(self, n_batch: int = 8, clock=None) -> None:
        self.n_batch, self.clock, self.batches, self.stamps = n_batch, clock, [], []

    def decode(self, calls) -> None:
        self.batches.append([(c.seq, len(c.tokens)) for c in calls])
        self.stamps.append(self.clock() if self.clock else None)
        for c in calls:
            c.done = True


def call(context, seq: int, n: int = 1, hidden: bool = False) -> Call:
    return Call(context, seq, [1] * n, 0, [n - 1], np.empty((1, 4), np.float32),
                np.empty((1, 2), np.float32) if hidden else None)


def run_together(scheduler: Scheduler, calls, stagger_s: float = 0.0) -> None:
    threads = []
    for c in calls:
        threads.append(in_thread(scheduler.run, c))
        time.sleep(stagger_s)
    for t in threads:
        t.join(timeout=10)


class WatchedClock(FakeClock):
    """A fake clock that counts how often it is read."""

    def __init__(self) -> None:
        super().__init__()
        self.reads, self._read = 0, threading.Condition()

    def __call__(self) -> float:
        with self._read:
            self.reads += 1
            self._read.notify_all()
        return self.now

    def read_at_least(self, n: int) -> bool:
        with self._read:
            return self._read.wait_for(lambda: self.reads >= n, timeout=30)


def test_by_default_each_call_is_decoded_alone_and_never_waits_for_the_others():
    # The clock never moves: a step that waited for the other writing slots would never be taken.
    scheduler, context = Scheduler(max_wait_s=1.0, clock=FakeClock()), FakeContext()
    for slot in range(3):
        scheduler.enter(slot)
    run_together(scheduler, [call(context, s) for s in range(3)], stagger_s=0.02)
    assert sorted(context.batches) == [[(0, 1)], [(1, 1)], [(2, 1)]]


def test_calls_are_decoded_oldest_first():
    clock = FakeClock()
    scheduler, context = Scheduler(clock=clock), FakeContext()
    for seq in (2, 0, 1):  # three calls waiting while a step ran
        queued(scheduler, [call(context, seq)], clock)
        clock.now += 0.01
    drained(scheduler)
    assert context.batches == [[(2, 1)], [(0, 1)], [(1, 1)]]


def queued(scheduler: Scheduler, calls, clock) -> None:
    """Calls handed to the scheduler at the clock's time, as `run` does, without a thread each."""
    for c in calls:
        c.since = clock()
        scheduler._pending.append(c)


def drained(scheduler: Scheduler) -> None:
    with scheduler._cond:
        while scheduler._pending:
            scheduler._lead()


def test_a_person_watching_goes_before_an_older_background_request_and_health_counts_both():
    clock = FakeClock()
    scheduler, context = Scheduler(clock=clock), FakeContext()
    background = [call(context, s) for s in (0, 1)]
    for c in background:
        c.priority = BACKGROUND
    queued(scheduler, background, clock)
    clock.now += 0.5
    queued(scheduler, [call(context, 2)], clock)  # a streamed answer's call, younger
    assert scheduler.waiting() == {"interactive": 1, "background": 2}
    drained(scheduler)
    assert context.batches == [[(2, 1)], [(0, 1)], [(1, 1)]]


def test_a_background_request_waits_no_longer_than_the_age_limit():
    clock = FakeClock()
    scheduler, context = Scheduler(clock=clock, age_limit_s=2.0), FakeContext()
    old = call(context, 0)
    old.priority = BACKGROUND
    queued(scheduler, [old], clock)
    clock.now += 2.0  # waited its age limit: it goes first, before a newer interactive call
    queued(scheduler, [call(context, 1)], clock)
    drained(scheduler)
    assert context.batches == [[(0, 1)], [(1, 1)]]


def test_a_person_between_two_steps_is_waited_for_before_a_background_call_but_no_longer_than_the_wait():
    clock = WatchedClock()
    scheduler, context = Scheduler(max_wait_s=0.05, clock=clock), FakeContext(clock=clock)
    scheduler.enter(0), scheduler.enter(1)
    scheduler.run(call(context, 0))  # the person's step; its next call comes once its Python has run
    title = call(context, 1)
    title.priority = BACKGROUND
    reads = clock.reads
    step = in_thread(scheduler.run, title)
    assert clock.read_at_least(reads + 3), "the background call did not wait"
    assert context.batches == [[(0, 1)]]
    person = in_thread(scheduler.run, call(context, 0))  # the person's next call goes first
    person.join(timeout=30)
    assert context.batches == [[(0, 1)], [(0, 1)]]
    clock.now += 0.05  # the person is between steps again: the title goes once the wait has run out, not before
    step.join(timeout=30)
    assert not step.is_alive() and context.batches == [[(0, 1)], [(0, 1)], [(1, 1)]]
    assert context.stamps[-1] == 1000.05


def test_a_background_call_does_not_wait_for_a_person_who_has_left():
    scheduler, context = Scheduler(max_wait_s=5.0, clock=FakeClock()), FakeContext()
    scheduler.enter(0), scheduler.enter(1)
    scheduler.run(call(context, 0))
    scheduler.leave(0)  # the clock never moves: a wait for slot 0 would never end
    title = call(context, 1)
    title.priority = BACKGROUND
    step = in_thread(scheduler.run, title)
    step.join(timeout=30)
    assert not step.is_alive() and context.batches == [[(0, 1)], [(1, 1)]]


def test_a_step_waits_for_every_writing_slot_then_decodes_them_in_one_batch():
    # The wait never runs out on a clock that does not move: the step is taken when all three have called.
    scheduler, context = Scheduler(max_wait_s=1.0, clock=FakeClock(), batch=True), FakeContext()
    for slot in range(3):
        scheduler.enter(slot)
    run_together(scheduler, [call(context, s) for s in range(3)], stagger_s=0.02)
    assert context.batches == [[(0, 1), (1, 1), (2, 1)]]


def test_a_slot_that_ends_is_not_waited_for():
    scheduler, context = Scheduler(max_wait_s=5.0, clock=FakeClock(), batch=True), FakeContext()
    scheduler.enter(0), scheduler.enter(1)
    step = in_thread(scheduler.run, call(context, 0))
    scheduler.leave(1)  # the clock never moves: only this can end the wait
    step.join(timeout=30)
    assert not step.is_alive() and context.batches == [[(0, 1)]]


def test_a_busy_slot_holds_a_step_up_no_longer_than_the_wait():
    clock = WatchedClock()
    scheduler, context = Scheduler(max_wait_s=0.05, clock=clock, batch=True), FakeContext(clock=clock)
    scheduler.enter(0), scheduler.enter(1)  # slot 1 writes but never calls
    step = in_thread(scheduler.run, call(context, 0))
    # Read for its deadline, then again after waiting: the step is waiting for slot 1, not decoding.
    assert clock.read_at_least(3), "the step did not wait"
    assert context.batches == []
    clock.now += 0.05
    step.join(timeout=30)
    assert not step.is_alive() and context.batches == [[(0, 1)]]
    assert context.stamps == [1000.05]  # decoded once the wait had run out on the scheduler's clock, not before


def test_a_batch_holds_one_model_and_mode_within_its_size():
    scheduler, draft, target = Scheduler(max_wait_s=0.2, batch=True), FakeContext(n_batch=8), FakeContext(n_batch=8)
    for slot in range(4):
        scheduler.enter(slot)
    run_together(scheduler, [call(draft, 0, 5), call(target, 1, 2), call(draft, 2, 4), call(draft, 3, 1, hidden=True)],
                 stagger_s=0.01)
    assert draft.batches[0] == [(0, 5)]  # slot 2's 4 tokens do not fit beside 5 in a batch of 8
    assert sorted(len(b) for b in draft.batches + target.batches) == [1, 1, 1, 1]


def test_an_error_in_a_step_reaches_every_call_in_it():
    class Failing(FakeContext):
        def decode(self, calls) -> None:
            for c in calls:
                c.error, c.done = RuntimeError("llama_decode failed with code 1"), True

    scheduler, context = Scheduler(max_wait_s=0.0), Failing()
    with pytest.raises(RuntimeError, match="code 1"):
        scheduler.run(call(context, 0))


def test_the_learned_rule_reading_the_hidden_state_works_in_slots_too(slots, alone):
    """Hidden states come from batches in embeddings mode, which the scheduler never mixes with others."""
    from .test_hidden import hidden_router

    router = hidden_router(alone.pair.draft.n_embd)
    config = GenerationConfig(policy="cascade", rule="learned", threshold=0.5, max_tokens=16, chat=False)
    engines = [alone, *slots]
    for engine in engines:
        engine.router = router
    try:
        expected = [text(alone, p, config) for p in PROMPTS]
        assert side_by_side(slots, PROMPTS, config) == expected
    finally:
        for engine in engines:
            engine.router = None


def test_a_long_read_goes_in_short_steps_only_in_a_context_that_slots_share(slots, alone):
    from cascade.engine.runner import SHARED_CHUNK

    tokens = alone.encode("The cat sat on the mat. " * 30, chat=False)[:200]
    assert len(tokens) == 200
    for engine, calls in ((slots[0], -(-200 // SHARED_CHUNK)), (alone, 1)):
        runner = engine.pair.draft
        runner.clear()
        before = runner.stats.calls
        runner.advance(tokens, 1)
        assert runner.stats.calls - before == calls
        runner.clear()


def test_the_seed_loads_its_copies_once_for_all_slots_of_a_pair(slots):
    from cascade.engine.seed import release_seed_models, seed_models

    try:
        assert seed_models(slots[0].pair) is seed_models(slots[3].pair)
    finally:
        release_seed_models(slots[0].pair)
