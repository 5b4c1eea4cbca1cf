"""``stop`` strings keep the constraint's guarantee: inside constrained text an occurrence ends the
text only where the text before it is complete; free text stops at the first one. Both models."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from localguide.errors import ArgumentError
from localguide.guides.stops import StopText

DATE = r"\d{4}-\d{2}-\d{2}"
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                           "city": {"type": "string", "maxLength": 20},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "city", "age"], "additionalProperties": False}
SENTENCE = 'start: "Hello, " NAME ". Bye, " NAME "."\nNAME: /[A-Z][a-z]{1,8}/\n'
STOPS = [",", ".", "-", '"']
SEEDS = range(2)  # (each test of a constraint kind draws at temperature 1, where stop strings occur)


# -- the text filter alone ------------------------------------------------------------------------

class _CompleteAt:
    """Complete text only before the characters ``at``."""

    def __init__(self, *at):
        self.at = set(at)

    def feed(self, text):
        pass

    def __call__(self, k):
        return k in self.at


def test_without_a_constraint_the_first_occurrence_stops():
    cut = StopText(["-"])
    assert cut.feed("a-b") == "a" and cut.hit and cut.feed("more") == ""


def test_an_occurrence_that_does_not_count_is_given_out_and_a_later_one_counts():
    cut = StopText(["-", "--x"], _CompleteAt(6))
    out = cut.feed("a-") + cut.feed("b-c") + cut.feed("d-e")
    assert out == "a-b-cd" and cut.hit


def test_text_that_may_begin_a_stop_string_is_held_back_until_it_does_not():
    cut = StopText(["STOP"])
    assert cut.feed("abcST") == "abc"
    assert cut.feed("OX") == "STOX"
    assert cut.feed("ST", final=True) == "ST" and not cut.hit


def test_stop_must_be_strings():
    with pytest.raises(ArgumentError, match="stop="):
        from localguide.guides.stops import check_stops

        check_stops(["a", ""])


# -- the library, each constraint kind ------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS)
def test_regex_text_goes_on_past_a_stop_string_inside_it(model, seed):
    text = model.generate("Albert Einstein's birth date (YYYY-MM-DD):", regex=DATE, stop=["-", "1", "0"],
                          seed=seed, temperature=1.0, max_tokens=16)
    assert re.fullmatch(DATE, text), text


def test_regex_text_stops_where_it_is_complete(model):
    # "\d+(-\d+)?": "1980" is complete before the "-", so the "-" stops it there.
    for seed in SEEDS:
        text = model.generate("Years: 1980-1990, 1770-1790, 2001-2011,", regex=r" \d{4}(-\d{4})?", stop=["-"],
                              seed=seed, temperature=1.0, max_tokens=12)
        assert re.fullmatch(r" \d{4}", text), text


def test_choice_is_cut_only_where_a_shorter_choice_ends(model):
    for seed in SEEDS:
        text = model.generate("Capital of France:", choice=[" Paris, France", " Rome, Italy"], stop=[","],
                              seed=seed, temperature=1.0, max_tokens=8)
        assert text in (" Paris, France", " Rome, Italy")
    text = model.generate("Say hi:", choice=[" hi. there", " hi"], stop=["."], seed=0, max_tokens=8)
    assert text == " hi"  # (" hi. there" cut before its "." is " hi": complete)


@pytest.mark.parametrize("seed", SEEDS)
def test_grammar_text_goes_on_past_stop_strings_inside_it(model, seed):
    text = model.generate("A greeting:", grammar=SENTENCE, stop=STOPS, seed=seed, temperature=1.0, max_tokens=24)
    assert re.fullmatch(r"Hello, [A-Z][a-z]{1,8}\. Bye, [A-Z][a-z]{1,8}\.", text), text


@pytest.mark.parametrize("seed", SEEDS)
def test_json_schema_document_is_whole_with_stop_strings_inside_it(model, seed):
    text = model.generate("A person as JSON:", json_schema=PERSON, strict=True, stop=STOPS, seed=seed,
                          temperature=1.0, max_tokens=64)
    jsonschema.validate(json.loads(text), PERSON)
    assert "," in text  # (between the properties: a stop string that was not a stop)


def test_free_text_stops_at_the_first_occurrence(model):
    text = model.generate("One, two, three, four, five, six,", stop=[","], seed=1, temperature=0, max_tokens=24)
    assert "," not in text
    pieces = list(model.stream("One, two, three, four, five, six,", stop=[","], seed=1, temperature=0,
                               max_tokens=24))
    assert "".join(pieces) == text


def test_chat_content_is_whole_and_the_reasoning_is_not_cut(model):
    ask = [{"role": "user", "content": "Give me a person as JSON."}]
    m = model.chat(ask, json_schema=PERSON, strict=True, stop=STOPS, seed=0, temperature=1.0, max_tokens=64)
    jsonschema.validate(json.loads(m.content), PERSON)
    m = model.chat(ask, json_schema=PERSON, strict=True, stop=STOPS, after="</think>", max_reasoning_tokens=12,
                   seed=0, temperature=1.0, max_tokens=80)
    jsonschema.validate(json.loads(m.content), PERSON)
    free = model.chat(ask, stop=[" "], seed=0, temperature=0, max_tokens=24)
    assert " " not in free.content
