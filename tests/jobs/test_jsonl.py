"""The batch job's files: input lines as items (ids given or numbered, bad lines as errors, one id
twice refused) and the output read back on a rerun (a torn last line cut off and done again)."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localguide.jobs import JobError, Output, id_key, read_input


def test_ids_are_given_or_the_line_number(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": "a", "prompt": "x"}\n\n{"prompt": "y"}\n{"id": 7, "messages": []}\n')
    entries = read_input(path)
    assert [(e.id, e.line) for e in entries] == [("a", 1), (3, 3), (7, 4)]
    assert entries[1].item == {"prompt": "y"} and entries[0].error is None


@pytest.mark.parametrize("line, words", [("not json", "line 1 is not JSON"), ("[1, 2]", "a JSON list, not an object"),
                                         ('{"id": [1], "prompt": "x"}', '"id" must be'),
                                         ('{"id": true, "prompt": "x"}', '"id" must be')])
def test_a_line_that_is_no_item_is_an_error_of_its_own(tmp_path, line, words):
    path = tmp_path / "in.jsonl"
    path.write_text(line + '\n{"prompt": "fine"}\n')
    bad, fine = read_input(path)
    assert words in bad.error and bad.id == 1 and bad.item is None
    assert fine.error is None and fine.id == 2


def test_one_id_twice_is_refused(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": "a", "prompt": "x"}\n{"prompt": "y"}\n{"id": "a", "prompt": "z"}\n')
    with pytest.raises(JobError, match="lines 1 and 3 have the same id"):
        read_input(path)


def test_a_number_and_its_text_are_two_ids(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": 1, "prompt": "x"}\n{"id": "1", "prompt": "y"}\n')
    assert len(read_input(path)) == 2 and id_key(1) != id_key("1")


def test_an_unreadable_input_says_so(tmp_path):
    with pytest.raises(JobError, match="cannot read"):
        read_input(tmp_path / "missing.jsonl")


records = st.lists(st.fixed_dictionaries({"id": st.one_of(st.integers(), st.text(max_size=5)),
                                          "text": st.text(max_size=20)}), max_size=8, unique_by=lambda r: id_key(r["id"]))


@settings(max_examples=150, deadline=None)
@given(records, st.data())
def test_a_rerun_reads_the_whole_lines_and_cuts_a_torn_one(tmp_path_factory, recs, data):
    path = tmp_path_factory.mktemp("out") / "out.jsonl"
    lines = [(json.dumps(r, ensure_ascii=False) + "\n").encode() for r in recs]
    whole = b"".join(lines)
    cut = data.draw(st.integers(0, len(whole)))
    path.write_bytes(whole[:cut])
    out = Output(path).open()
    try:
        ends = [sum(map(len, lines[:i + 1])) for i in range(len(lines))]
        kept = [r for r, end in zip(recs, ends) if end <= cut]
        assert out.done == {id_key(r["id"]) for r in kept}
        assert path.read_bytes() == b"".join(lines[:len(kept)])
        out.write({"id": "new", "text": "t"})
        assert json.loads(path.read_bytes().splitlines()[-1]) == {"id": "new", "text": "t"}
    finally:
        out.close()


def test_a_garbled_line_in_the_middle_is_refused(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_bytes(b'{"id": 1, "text": "a"}\ngarbage\n{"id": 2, "text": "b"}\n')
    with pytest.raises(JobError, match="line 2 is not an output line"):
        Output(path).open()


def test_a_write_that_fails_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    path = tmp_path / "out.jsonl"
    out = Output(path).open()
    out.write({"id": 1, "text": "a"})
    before = path.read_bytes()
    real = os.write

    def full(fd, data):  # (half the line, then the disk is full)
        if len(data) > 4:
            real(fd, data[:4])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(JobError, match="cannot write .*No space left"):
        out.write({"id": 2, "text": "b"})
    monkeypatch.setattr(os, "write", real)
    out.close()
    assert path.read_bytes() == before
    assert Output(path).open().done == {id_key(1)}


def test_a_file_that_is_no_output_of_ours_is_refused_not_cut(tmp_path):
    path = tmp_path / "old.jsonl"
    path.write_bytes(b'{"foo": 1}\n')
    with pytest.raises(JobError, match="line 1 is not an output line"):
        Output(path).open()
    assert path.read_bytes() == b'{"foo": 1}\n'
