from cascade.engine.text import TextAssembler


def pieces_of(text: str, size: int = 1) -> list[bytes]:
    raw = text.encode("utf-8")
    return [raw[i : i + size] for i in range(0, len(raw), size)]


def test_characters_split_across_tokens_arrive_whole():
    a = TextAssembler()
    deltas = [a.push(p) for p in pieces_of("a🐱猫é", 1)]
    assert deltas == ["a", "", "", "", "🐱", "", "", "猫", "", "é"]
    assert a.text == "a🐱猫é"


def test_incomplete_trailing_bytes_are_held_back():
    a = TextAssembler()
    a.push("x".encode() + "🐱".encode()[:2])
    assert a.text == "x"


def test_stop_string_cuts_inside_a_token_and_marks_stopped():
    a = TextAssembler(stop=("END",))
    assert a.push(b"abc E") == "abc E"
    assert not a.stopped
    assert a.push(b"ND and more") == "ND"
    assert a.stopped and a.text == "abc END"


def test_stop_string_in_a_single_token():
    a = TextAssembler(stop=("\n\n",))
    assert a.push(b"hi\n\nthere") == "hi\n\n"
    assert a.stopped
