"""Who gets the next free slot (serving/lender.py), on a fake clock: the last slot kept for a newcomer's person, a
client's fair share, a person watching before a background request, a background request never starved past its
age limit."""

from __future__ import annotations

import threading
import time

from cascade.serving.lender import Asker, Lender

from .helpers import FakeClock


def waiting_in_turn(lender: Lender, askers: list[Asker], clock: FakeClock) -> list:
    """Each asker waiting for a slot, in this order (a second apart on the clock); what each gets, as they get
    it: [(asker, engine)]."""
    got: list = []
    threads = []
    for i, asker in enumerate(askers):
        t = threading.Thread(target=lambda a=asker: got.append((a, lender.get(a))), daemon=True)
        t.start()
        threads.append(t)
        deadline = time.monotonic() + 10
        while sum(lender.waiting().values()) < i + 1 and time.monotonic() < deadline:
            time.sleep(0.001)
        clock.now += 1.0
    return got


def given_back_one_by_one(lender: Lender, engines: list, got: list) -> None:
    for engine in engines:
        n = len(got) + 1
        lender.put(engine)
        deadline = time.monotonic() + 10
        while len(got) < n and time.monotonic() < deadline:
            time.sleep(0.001)


def test_a_person_watching_gets_the_next_slot_before_an_older_background_request():
    clock = FakeClock()
    lender = Lender(age_limit_s=10.0, clock=clock)
    title, chat = Asker("open-webui", interactive=False), Asker("someone", interactive=True)
    got = waiting_in_turn(lender, [title, chat], clock)
    assert lender.waiting() == {"interactive": 1, "background": 1}
    given_back_one_by_one(lender, ["slot 1"], got)
    lender.put("slot 2")  # the last free slot: kept for a person
    given_back_one_by_one(lender, ["slot 3"], got)
    assert [a for a, _ in got] == [chat, title]


def test_a_background_request_goes_first_once_it_has_waited_its_age_limit():
    clock = FakeClock()
    lender = Lender(age_limit_s=2.0, clock=clock)
    title, chat = Asker("open-webui", interactive=False), Asker("someone", interactive=True)
    got = waiting_in_turn(lender, [title, chat], clock)
    clock.now += 2.0
    given_back_one_by_one(lender, ["slot 1", "slot 2"], got)
    assert [a for a, _ in got] == [title, chat]


def test_a_client_holding_its_share_waits_behind_another_client():
    clock = FakeClock()
    lender = Lender(clock=clock)
    for slot in ("slot 1", "slot 2", "slot 3", "slot 4"):
        lender.put(slot)
    busy, another = Asker("busy client"), Asker("another", interactive=False)
    assert lender.get(Asker("leaving")) == "slot 4"
    assert [lender.get(busy), lender.get(busy)] == ["slot 3", "slot 2"]
    got = waiting_in_turn(lender, [busy, another], clock)  # neither may take the last free slot (slot 1)
    assert got == []
    given_back_one_by_one(lender, ["slot 4"], got)  # two free: the busy client holds 2 of 4, its share
    assert [a.client for a, _ in got] == ["another"]
    given_back_one_by_one(lender, ["slot 3"], got)
    assert [a.client for a, _ in got] == ["another", "busy client"]
    assert lender.qsize() == 1


def four_slots() -> Lender:
    lender = Lender(clock=FakeClock())
    for slot in range(4):
        lender.put(f"slot {slot}")
    return lender


def test_the_last_free_slot_waits_for_a_newcomers_person():
    lender = four_slots()
    for _ in range(3):  # a client alone takes all but the last slot
        lender.get(Asker("one client"))
    got = waiting_in_turn(lender, [Asker("one client"), Asker("someone", interactive=False)], lender._clock)
    assert got == [] and lender.qsize() == 1  # its fourth stream, and a background request, wait
    assert lender.get(Asker("a second client")) == "slot 0"  # a newcomer's person never waits for others' answers


def test_a_chat_apps_stream_takes_the_last_slot_beside_its_own_background_requests():
    lender = four_slots()
    titles = [lender.get(Asker("chat app", interactive=False)) for _ in range(3)]
    assert len(titles) == 3 and lender.get(Asker("chat app")) == "slot 0"


def test_an_engine_given_back_is_free_again_and_counts_for_no_one():
    lender = Lender()
    lender.put("slot")
    engine = lender.get(Asker("a"))
    lender.put(engine)
    assert lender.qsize() == 1 and lender.share() == 1 and lender.get(Asker("b")) == "slot"
