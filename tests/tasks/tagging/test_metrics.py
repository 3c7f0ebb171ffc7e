"""bert_tf.tasks.tagging.metrics against conlleval's rules and seqeval's strict mode.

Golden numbers are worked out by hand next to each case. conlleval_reference.py, a literal
re-statement of conlleval.pl, is compared with the module on generated tag sequences; the strict
mode is compared with a brute-force reading of its definition at the bottom of this file.
"""

import io as io_lib
import os
import re
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from bert_tf.tasks.tagging import metrics as tm
from tests.tasks.tagging import conlleval_reference as ref

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def counts(scores):
  """The counts of a result, for compact comparisons."""
  return (scores["tokens"], scores["correct_tags"], scores["gold_entities"],
          scores["predicted_entities"], scores["correct_entities"])


def per_type_counts(scores):
  return {t: (v["gold"], v["predicted"], v["correct"]) for t, v in scores["per_type"].items()}


def conll_lines(gold, predicted):
  """A conlleval input file (lines) of the sentences, an empty line after each."""
  lines = []
  for gold_tags, predicted_tags in zip(gold, predicted):
    lines += [f"w{i} {g} {p}" for i, (g, p) in enumerate(zip(gold_tags, predicted_tags))]
    lines.append("")
  return lines


def write(path, text):
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)
  return str(path)


# === split_tag ===


@pytest.mark.parametrize("tag, expected", [
    ("B-PER", ("B", "PER")),
    ("I-ORG-X", ("I", "ORG-X")),      # split at the first hyphen: hyphens stay in the type
    ("O", ("O", "")),
    ("NN", ("NN", "")),               # no hyphen: all prefix
    ("-LRB-", ("", "LRB-")),
    ("B-", ("B", "")),
    ("B-0", ("B", "")),               # conlleval's Perl reads the type "0" as false
    ("B-00", ("B", "00")),
    ("S-LOC", ("S", "LOC")),
])
def test_split_tag(tag, expected):
  assert tm.split_tag(tag) == expected


# === The conlleval mode, hand-computed ===


def test_iob1_i_tags_start_entities():
  gold = [["I-ORG", "I-ORG", "O", "I-PER", "B-PER", "O"]]
  predicted = [["I-ORG", "I-ORG", "O", "I-PER", "I-PER", "O"]]
  # gold: ORG 0-2, PER 3-4, PER 4-5 (B- only between adjacent PERs); predicted: ORG 0-2, PER 3-5
  assert tm.entities(gold[0]) == [("ORG", 0, 2), ("PER", 3, 4), ("PER", 4, 5)]
  assert tm.entities(predicted[0]) == [("ORG", 0, 2), ("PER", 3, 5)]
  scores = tm.evaluate(gold, predicted)
  assert counts(scores) == (6, 5, 3, 2, 1)
  assert scores["precision"] == 0.5
  assert scores["recall"] == pytest.approx(1 / 3)
  assert scores["f1"] == pytest.approx(0.4)  # 2 * 1/2 * 1/3 / (5/6)
  assert scores["accuracy"] == pytest.approx(5 / 6)
  assert per_type_counts(scores) == {"ORG": (1, 1, 1), "PER": (2, 1, 0)}
  assert scores["per_type"]["ORG"]["f1"] == 1.0
  assert scores["per_type"]["PER"]["precision"] == 0.0
  assert scores["mode"] == "conlleval" and scores["scheme"] is None


def test_iob2_two_sentences():
  gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
  predicted = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "B-ORG"]]
  # gold PER, LOC | ORG; predicted PER, ORG | ORG, ORG; correct: PER and the first ORG.
  scores = tm.evaluate(gold, predicted)
  assert counts(scores) == (6, 4, 3, 4, 2)
  assert scores["precision"] == 0.5
  assert scores["recall"] == pytest.approx(2 / 3)
  assert scores["f1"] == pytest.approx(4 / 7)
  assert per_type_counts(scores) == {"LOC": (1, 0, 0), "ORG": (1, 3, 1), "PER": (1, 1, 1)}
  assert list(scores["per_type"]) == ["LOC", "ORG", "PER"]
  assert scores["per_type"]["ORG"]["precision"] == pytest.approx(1 / 3)
  assert scores["per_type"]["ORG"]["f1"] == pytest.approx(0.5)
  assert scores["per_type"]["LOC"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "gold": 1,
                                       "predicted": 0, "correct": 0}


def test_iobes_single_and_end_tags():
  gold = [["S-LOC", "O", "B-PER", "I-PER", "E-PER"]]
  predicted = [["S-LOC", "O", "B-PER", "E-PER", "O"]]
  assert tm.entities(gold[0]) == [("LOC", 0, 1), ("PER", 2, 5)]
  assert tm.entities(predicted[0]) == [("LOC", 0, 1), ("PER", 2, 4)]
  scores = tm.evaluate(gold, predicted)
  assert counts(scores) == (5, 3, 2, 2, 1)
  assert per_type_counts(scores) == {"LOC": (1, 1, 1), "PER": (1, 1, 0)}


def test_iobes_adjacent_entities_need_the_extension():
  tags = ["B-PER", "E-PER", "S-PER", "S-PER", "B-PER", "I-PER", "E-PER"]
  assert tm.entities(tags) == [("PER", 0, 2), ("PER", 2, 3), ("PER", 3, 4), ("PER", 4, 7)]
  assert tm.evaluate([tags], [tags])["correct_entities"] == 4
  # conlleval.pl's own rules read all of it as one chunk (E- then B- ends and starts nothing;
  # S- is an unknown prefix that starts only on a type change).
  state, _ = ref.conlleval(conll_lines([tags], [tags]), rules="original")
  assert state["found_correct"] == 1
  state, _ = ref.conlleval(conll_lines([tags], [tags]), rules="extended")
  assert state["found_correct"] == 4


def test_a_type_change_inside_a_chunk_splits_it():
  gold = [["B-PER", "I-PER", "I-PER"]]
  predicted = [["B-PER", "I-LOC", "I-PER"]]
  assert tm.entities(predicted[0]) == [("PER", 0, 1), ("LOC", 1, 2), ("PER", 2, 3)]
  scores = tm.evaluate(gold, predicted)
  assert counts(scores) == (3, 2, 1, 3, 0)
  assert scores["f1"] == 0.0


@pytest.mark.parametrize("predicted", [
    ["B-PER", "I-PER", "I-PER", "O"],   # runs one token longer
    ["B-PER", "O", "O", "O"],           # stops one token early
    ["O", "I-PER", "I-PER", "O"],       # starts one token late
    ["B-LOC", "I-LOC", "O", "O"],       # the right span with the wrong type
])
def test_overlapping_predictions_are_not_correct(predicted):
  gold = ["B-PER", "I-PER", "O", "O"]
  scores = tm.evaluate([gold], [predicted])
  assert scores["gold_entities"] == 1 and scores["predicted_entities"] == 1
  assert scores["correct_entities"] == 0
  assert (scores["precision"], scores["recall"], scores["f1"]) == (0.0, 0.0, 0.0)


def test_empty_predictions_score_zero():
  scores = tm.evaluate([["B-PER", "O"]], [["O", "O"]])
  assert counts(scores) == (2, 1, 1, 0, 0)
  assert (scores["precision"], scores["recall"], scores["f1"]) == (0.0, 0.0, 0.0)
  assert scores["accuracy"] == 0.5
  assert tm.conlleval_report(scores) == (
      "processed 2 tokens with 1 phrases; found: 0 phrases; correct: 0.\n"
      "accuracy:  50.00%; precision:   0.00%; recall:   0.00%; FB1:   0.00\n"
      "              PER: precision:   0.00%; recall:   0.00%; FB1:   0.00  0\n")


def test_a_sentence_of_only_o():
  scores = tm.evaluate([["O", "O", "O"]], [["O", "O", "O"]])
  assert counts(scores) == (3, 3, 0, 0, 0)
  assert scores["accuracy"] == 1.0
  assert (scores["precision"], scores["recall"], scores["f1"]) == (0.0, 0.0, 0.0)
  assert scores["per_type"] == {}
  assert tm.conlleval_report(scores) == (
      "processed 3 tokens with 0 phrases; found: 0 phrases; correct: 0.\n"
      "accuracy: 100.00%; precision:   0.00%; recall:   0.00%; FB1:   0.00\n")


def test_no_sentences():
  scores = tm.evaluate([], [])
  assert counts(scores) == (0, 0, 0, 0, 0)
  assert scores["accuracy"] == 0.0
  assert tm.conlleval_report(scores) == (
      "processed 0 tokens with 0 phrases; found: 0 phrases; correct: 0.\n")


def test_plain_pos_tags_make_no_chunks():
  gold = [["DT", "NN", "VBZ", "."], ["PRP", "VBD"]]
  predicted = [["DT", "NN", "NN", "."], ["PRP", "VBD"]]
  scores = tm.evaluate(gold, predicted)
  assert counts(scores) == (6, 5, 0, 0, 0)
  assert scores["accuracy"] == pytest.approx(5 / 6)
  assert tm.entities(gold[0]) == []
  assert tm.conlleval_report(scores) == (
      "processed 6 tokens with 0 phrases; found: 0 phrases; correct: 0.\n"
      "accuracy:  83.33%; precision:   0.00%; recall:   0.00%; FB1:   0.00\n")


def test_hyphenated_pos_tags_make_chunks_as_in_conlleval():
  # "-LRB-" is prefix "" with type "LRB-"; "NN" after it changes the type back to "".
  assert tm.entities(["-LRB-", "NN", "-RRB-", "NN"]) == [
      ("LRB-", 0, 1), ("", 1, 2), ("RRB-", 2, 3), ("", 3, 4)]


def test_hyphenated_types():
  gold = [["B-ORG-X", "I-ORG-X", "O", "B-ORG"]]
  predicted = [["B-ORG-X", "I-ORG-X", "O", "B-ORG-X"]]
  assert tm.entities(gold[0]) == [("ORG-X", 0, 2), ("ORG", 3, 4)]
  scores = tm.evaluate(gold, predicted)
  assert per_type_counts(scores) == {"ORG": (1, 0, 0), "ORG-X": (1, 2, 1)}


def test_sentence_boundaries_end_entities():
  gold = [["B-PER", "I-PER"], ["I-PER", "O"]]
  assert tm.evaluate(gold, gold)["gold_entities"] == 2
  assert tm.evaluate([gold[0] + gold[1]], [gold[0] + gold[1]])["gold_entities"] == 1


def test_a_chunk_still_open_at_the_end_is_counted():
  # "NN" after "B-PER" starts a chunk of type "" (a type change) that no "O" ends (only B-,
  # I-, E-, S- and typed tags end before "O"): it is still open, and correct, at the end.
  gold = [["B-PER", "NN"]]
  scores = tm.evaluate(gold, gold)
  assert counts(scores) == (2, 2, 2, 2, 2)
  assert per_type_counts(scores) == {"": (1, 1, 1), "PER": (1, 1, 1)}
  assert_equals_reference(gold, gold, rules="extended")
  assert_equals_reference(gold, gold, rules="original")


def test_a_type_change_that_ends_no_chunk_still_breaks_a_match():
  # A "." prefix ends nothing, so the gold chunk runs on into I-Y; the types of the current
  # tags differ there (Y, X), which drops the pair although neither side ended.
  gold = [["B-X", ".-X", "I-Y"]]
  predicted = [["B-X", "I-X", "I-X"]]
  scores = tm.evaluate(gold, predicted)
  assert counts(scores) == (3, 1, 2, 1, 0)
  assert_equals_reference(gold, predicted, rules="extended")


def test_conlleval_entities_close_at_the_end_of_the_sentence():
  assert tm.entities(["O", "B-PER", "I-PER"]) == [("PER", 1, 3)]
  assert tm.entities(["I-PER"]) == [("PER", 0, 1)]
  assert tm.entities(["[", "]", "O"]) == [("", 0, 1), ("", 1, 2)]  # brackets: length 1
  assert tm.entities([]) == []


def test_report_text_by_hand():
  gold = [["I-ORG", "I-ORG", "O", "I-PER", "B-PER", "O"]]
  predicted = [["I-ORG", "I-ORG", "O", "I-PER", "I-PER", "O"]]
  assert tm.conlleval_report(tm.evaluate(gold, predicted)) == (
      "processed 6 tokens with 3 phrases; found: 2 phrases; correct: 1.\n"
      "accuracy:  83.33%; precision:  50.00%; recall:  33.33%; FB1:  40.00\n"
      "              ORG: precision: 100.00%; recall: 100.00%; FB1: 100.00  1\n"
      "              PER: precision:   0.00%; recall:   0.00%; FB1:   0.00  1\n")


def test_report_prints_the_empty_type_twice_like_conlleval():
  # Bare B / I tags make chunks of type "": conlleval's duplicate check lets it through twice
  # when both sides have such chunks (checked against the Perl script).
  line = "                 : precision: 100.00%; recall: 100.00%; FB1: 100.00  1\n"
  scores = tm.evaluate([["B", "I", "O"]], [["B", "I", "O"]])
  assert per_type_counts(scores) == {"": (1, 1, 1)}
  assert tm.conlleval_report(scores) == (
      "processed 3 tokens with 1 phrases; found: 1 phrases; correct: 1.\n"
      "accuracy: 100.00%; precision: 100.00%; recall: 100.00%; FB1: 100.00\n" + line * 2)
  only_gold = tm.conlleval_report(tm.evaluate([["B", "I"]], [["O", "O"]]))
  assert only_gold.count("                 : precision") == 1


def test_report_aligns_types_by_bytes():
  report = tm.conlleval_report(tm.evaluate([["B-\u00e9t\u00e9"]], [["B-\u00e9t\u00e9"]]))
  # "\u00e9t\u00e9" is 5 bytes in UTF-8: Perl's %17s pads it with 12 spaces.
  assert report.splitlines()[2] == " " * 12 + "\u00e9t\u00e9: precision: 100.00%; recall: " \
                                              "100.00%; FB1: 100.00  1"


def test_report_uses_the_percent_arithmetic():
  # 1 of 2 predicted, 1 of 6 gold: P 50%, R 16.666..%, FB1 2 * 50 * 16.666.. / 66.666.. = 25%.
  gold = [["S-A"] * 6]
  predicted = [["S-A", "O", "O", "B-A", "E-A", "O"]]
  scores = tm.evaluate(gold, predicted)
  assert counts(scores)[2:] == (6, 2, 1)
  assert "precision:  50.00%; recall:  16.67%; FB1:  25.00\n" in tm.conlleval_report(scores)


# === Input checks ===


def test_sentence_count_mismatch():
  with pytest.raises(ValueError, match="1 gold sentences but 2 predicted"):
    tm.evaluate([["O"]], [["O"], ["O"]])


def test_sentence_length_mismatch_names_the_sentence():
  with pytest.raises(ValueError, match="sentence 2: 2 gold tags but 1 predicted"):
    tm.evaluate([["O"], ["O"], ["O", "O"]], [["O"], ["O"], ["O"]])


def test_a_string_instead_of_a_sentence():
  with pytest.raises(ValueError, match="sentence 0: the gold sentence .* string"):
    tm.evaluate(["B-PER O"], [["B-PER", "O"]])
  with pytest.raises(ValueError, match="not a string"):
    tm.evaluate([[1]], [["O"]])
  with pytest.raises(ValueError, match="string"):
    tm.entities("B-PER")


def test_modes_and_schemes_are_checked():
  with pytest.raises(ValueError, match="unknown mode 'lenient'"):
    tm.evaluate([["O"]], [["O"]], mode="lenient")
  with pytest.raises(ValueError, match="for mode='strict'"):
    tm.evaluate([["O"]], [["O"]], scheme="iob2")
  with pytest.raises(ValueError, match="supports the schemes iob2, iobes; got 'iob1'"):
    tm.evaluate([["O"]], [["O"]], mode="strict", scheme="iob1")


# === detect_scheme ===


@pytest.mark.parametrize("sentences, expected", [
    ([["B-PER", "I-PER", "O", "B-LOC"]], "iob2"),
    ([["O", "O"]], "iob2"),
    ([], "iob2"),
    ([["I-PER", "I-PER", "B-PER"]], "iob1"),     # I- at a sentence start
    ([["B-PER"], ["I-PER"]], "iob1"),            # ... also of a later sentence
    ([["O", "I-LOC"]], "iob1"),                  # I- after O
    ([["B-PER", "I-LOC"]], "iob1"),              # I- after another type
    ([["S-PER", "B-LOC", "E-LOC"]], "iobes"),
    ([["I-PER"], ["B-LOC", "E-LOC"]], "iobes"),  # E-/S- win over IOB1
    ([["DT", "NN"]], "plain"),
    ([["B"], ["-LRB-", "B-"]], "plain"),         # bare B, hyphenated POS, no type: no prefix
    ([["O-PER"]], "plain"),
])
def test_detect_scheme(sentences, expected):
  assert tm.detect_scheme(sentences) == expected


@pytest.mark.parametrize("sentences, message", [
    # A plain tag among prefixed ones (or a prefixed one among plain ones) is not "plain":
    # it would add a label and turn entity scores into token accuracy.
    ([["B-PER", "NN"]], "sentence 1, token 2: tag 'NN' is outside the IOB2 scheme"),
    ([["S-PER"], ["B"]], "sentence 2, token 1: tag 'B' is outside the IOBES scheme"),
    ([["B-PER", "I-PER", "O", "b-loc"]], "token 4: tag 'b-loc' is outside the IOB2 scheme"),
    ([["I-PER", "O", "PER"]], "token 3: tag 'PER' is outside the IOB1 scheme"),
    ([["B-X", "I-X"], ["B-"]], "sentence 2, token 1: tag 'B-' is outside the IOB2 scheme"),
    ([["NN", "VB", "B-NP", "DT"]], "token 3: tag 'B-NP' has a scheme prefix, but the other "
     "tags are plain"),
])
def test_detect_scheme_refuses_mixed_tags(sentences, message):
  with pytest.raises(ValueError) as e:
    tm.detect_scheme(sentences)
  assert message in str(e.value)


@pytest.mark.parametrize("sentences, expected", [
    ([["B-PER", "I-PER", "O", "PER"], ["B-LOC"]], (0, 3, "PER", "iob2", True)),
    ([["B-PER", "I-PER", "O"], ["S-LOC"], ["B-LOC", "O"]], (1, 0, "S-LOC", "iob2", True)),
    ([["S-PER", "O", "B-LOC", "E-LOC"], ["B-ORG", "O"]], (1, 0, "B-ORG", "iobes", True)),
    ([["B-PER", "E-PER"], ["B-LOC", "I-LOC"], ["S-X"]], (1, 1, "I-LOC", "iobes", True)),
    # Both I- and B- start entities after "O": valid tags, only a warning.
    ([["B-PER", "I-PER", "O", "I-LOC"], ["B-LOC"]], (0, 3, "I-LOC", "iob2", False)),
    ([["I-PER", "O", "I-LOC"], ["O", "B-LOC"]], (1, 1, "B-LOC", "iob1", False)),
    ([["B-PER", "I-PER", "O", "B-LOC"], ["O"]], None),
    ([["I-PER", "B-PER", "O", "I-LOC"]], None),            # IOB1: B- only after its type
    ([["S-PER", "B-LOC", "I-LOC", "E-LOC"]], None),
    ([["NN", "-LRB-", "O"]], None),
])
def test_scheme_conflict_names_the_rarer_kind(sentences, expected):
  conflict = tm.scheme_conflict(sentences)
  assert (conflict if conflict is None else conflict[:4] + (conflict.fatal,)) == expected


def test_detect_scheme_takes_an_iterator():
  assert tm.detect_scheme(iter([["O", "I-PER"]])) == "iob1"


# === The strict mode, hand-computed ===


def test_strict_iob2_drops_an_i_that_continues_nothing():
  tags = ["O", "I-PER", "I-PER"]
  assert tm.entities(tags, mode="strict", scheme="iob2") == []
  assert tm.entities(tags) == [("PER", 1, 3)]
  assert tm.entities(["B-PER", "I-LOC", "I-PER"], "strict", "iob2") == [("PER", 0, 1)]
  assert tm.entities(["B-PER", "B-PER", "I-PER"], "strict", "iob2") == [
      ("PER", 0, 1), ("PER", 1, 3)]


def test_strict_iob2_scores():
  gold = [["B-PER", "I-PER", "O", "B-LOC"]]
  predicted = [["O", "I-PER", "I-PER", "B-LOC"]]
  strict = tm.evaluate(gold, predicted, mode="strict")
  assert strict["scheme"] == "iob2" and strict["mode"] == "strict"  # detected from the gold
  assert counts(strict) == (4, 2, 2, 1, 1)
  assert (strict["precision"], strict["recall"]) == (1.0, 0.5)
  assert strict["f1"] == pytest.approx(2 / 3)
  assert per_type_counts(strict) == {"LOC": (1, 1, 1), "PER": (1, 0, 0)}
  lenient = tm.evaluate(gold, predicted)
  assert counts(lenient) == (4, 2, 2, 2, 1)  # conlleval reads "O I-PER I-PER" as a PER


def test_strict_iobes():
  assert tm.entities(["B-PER", "I-PER", "O"], "strict", "iobes") == []
  assert tm.entities(["B-PER", "I-PER", "O"]) == [("PER", 0, 2)]
  assert tm.entities(["S-LOC", "B-PER", "I-PER", "E-PER", "B-ORG", "E-ORG"],
                     "strict", "iobes") == [("LOC", 0, 1), ("PER", 1, 4), ("ORG", 4, 6)]
  assert tm.entities(["B-PER", "E-LOC", "S-PER", "B-LOC", "B-LOC", "E-LOC", "I-LOC", "E-LOC"],
                     "strict", "iobes") == [("PER", 2, 3), ("LOC", 4, 6)]
  scores = tm.evaluate([["S-LOC", "B-PER", "E-PER"]], [["S-LOC", "B-PER", "I-PER"]],
                       mode="strict")
  assert scores["scheme"] == "iobes"
  assert counts(scores) == (3, 2, 2, 1, 1)


def test_strict_rejects_tags_outside_the_scheme():
  with pytest.raises(ValueError, match="'E-PER' is not an IOB2 tag"):
    tm.entities(["B-PER", "E-PER"], mode="strict", scheme="iob2")
  with pytest.raises(ValueError, match="'NN' is not an IOBES tag"):
    tm.entities(["NN"], mode="strict", scheme="iobes")
  with pytest.raises(ValueError, match="'B-'"):
    tm.entities(["B-"], mode="strict", scheme="iob2")
  with pytest.raises(ValueError, match="sentence 1: predicted tag 'S-PER' is not an IOB2 tag"):
    tm.evaluate([["O"], ["B-PER"]], [["O"], ["S-PER"]], mode="strict")


def test_strict_refuses_iob1_and_plain_gold():
  with pytest.raises(ValueError, match="gold tags look like IOB1"):
    tm.evaluate([["I-PER", "O"]], [["I-PER", "O"]], mode="strict")
  with pytest.raises(ValueError, match="gold tags look like PLAIN"):
    tm.evaluate([["NN"]], [["NN"]], mode="strict")
  with pytest.raises(ValueError, match="the tags look like IOB1"):
    tm.entities(["I-PER"], mode="strict")
  # With the scheme given, the same gold is read by the IOB2 rules.
  assert tm.evaluate([["I-PER", "O"]], [["I-PER", "O"]], mode="strict",
                     scheme="iob2")["gold_entities"] == 0


def test_strict_report_has_the_conlleval_layout():
  scores = tm.evaluate([["B-PER", "I-PER", "O"]], [["B-PER", "I-PER", "O"]], mode="strict")
  assert tm.conlleval_report(scores) == (
      "processed 3 tokens with 1 phrases; found: 1 phrases; correct: 1.\n"
      "accuracy: 100.00%; precision: 100.00%; recall: 100.00%; FB1: 100.00\n"
      "              PER: precision: 100.00%; recall: 100.00%; FB1: 100.00  1\n")


# === Files ===


def test_read_conll_predictions(tmp_path):
  path = write(tmp_path / "p.txt",
               "\n"                              # a leading empty line
               "-DOCSTART- O O\n"                # a token (as in conlleval)
               "\n\n"
               "EU B-ORG B-ORG\r\n"              # CRLF
               "rejects O O\n"
               "-X- O O\n"                       # conlleval's boundary
               "German\tB-MISC  I-MISC\n"        # tabs and runs of spaces
               "\n"
               "Peter B-PER B-PER")              # no final newline
  gold, predicted = tm.read_conll_predictions(path)
  assert gold == [["O"], ["B-ORG", "O"], ["B-MISC"], ["B-PER"]]
  assert predicted == [["O"], ["B-ORG", "O"], ["I-MISC"], ["B-PER"]]


def test_read_conll_predictions_with_a_delimiter(tmp_path):
  path = write(tmp_path / "p.tsv", "New York\tB-LOC\tB-LOC\t\nis\tO\tO\n\n")
  assert tm.read_conll_predictions(path, delimiter="\t") == ([["B-LOC", "O"]],
                                                             [["B-LOC", "O"]])


@pytest.mark.parametrize("text, message", [
    ("a O O\nb O\n", r":2: 2 fields, but line 1 has 3"),
    ("\na O O\n\n-X-\n", r":4: 1 fields, but line 2 has 3"),  # boundaries count too
    ("a\nb\n", r":1: 1 field; a token line needs at least 2"),
])
def test_read_conll_predictions_errors(tmp_path, text, message):
  path = write(tmp_path / "bad.txt", text)
  with pytest.raises(ValueError, match=f"^{re.escape(path)}{message}"):
    tm.read_conll_predictions(path)


def test_read_conll_predictions_not_utf8(tmp_path):
  path = tmp_path / "latin1.txt"
  path.write_bytes("M\u00fcnchen B-LOC B-LOC\n".encode("latin-1"))
  with pytest.raises(ValueError, match="not UTF-8"):
    tm.read_conll_predictions(str(path))


# === The command line ===

CLI_TEXT = ("Rabinovich I-ORG I-ORG\nKing I-ORG I-ORG\n. O O\nPeter I-PER I-PER\n"
            "Blackburn B-PER I-PER\n. O O\n\n")
CLI_REPORT = ("processed 6 tokens with 3 phrases; found: 2 phrases; correct: 1.\n"
              "accuracy:  83.33%; precision:  50.00%; recall:  33.33%; FB1:  40.00\n"
              "              ORG: precision: 100.00%; recall: 100.00%; FB1: 100.00  1\n"
              "              PER: precision:   0.00%; recall:   0.00%; FB1:   0.00  1\n")


def test_main_prints_the_report(tmp_path, capsys):
  path = write(tmp_path / "p.txt", CLI_TEXT)
  assert tm.main([path]) == 0
  out = capsys.readouterr().out
  assert out == CLI_REPORT
  assert out == tm.conlleval_report(tm.evaluate(*tm.read_conll_predictions(path)))


def test_main_reads_stdin(monkeypatch, capsys):
  monkeypatch.setattr(sys, "stdin", io_lib.StringIO(CLI_TEXT))
  assert tm.main(["-"]) == 0
  assert capsys.readouterr().out == CLI_REPORT


def test_main_strict_and_delimiter(tmp_path, capsys):
  path = write(tmp_path / "p.tsv", "New York\tB-LOC\tB-LOC\nis\tO\tI-LOC\n\n")
  assert tm.main([path, "--strict", "--scheme", "iob2", "-d", "\\t"]) == 0
  assert capsys.readouterr().out == (
      "processed 2 tokens with 1 phrases; found: 1 phrases; correct: 0.\n"
      "accuracy:  50.00%; precision:   0.00%; recall:   0.00%; FB1:   0.00\n"
      "              LOC: precision:   0.00%; recall:   0.00%; FB1:   0.00  1\n")


def test_main_malformed_file(tmp_path, capsys):
  path = write(tmp_path / "bad.txt", "a B-PER B-PER\nb O O\nc O\n")
  assert tm.main([path]) == 1
  captured = capsys.readouterr()
  assert captured.out == ""
  assert captured.err == (f"tagging_metrics: error: {path}:3: 2 fields, but line 1 has 3 "
                          f"(every token line needs the same fields, the last two the gold "
                          f"and the predicted tag)\n")


def test_main_errors(tmp_path, capsys):
  assert tm.main([str(tmp_path / "missing.txt")]) == 1
  assert capsys.readouterr().err.startswith("tagging_metrics: error: ")
  path = write(tmp_path / "iob1.txt", "a I-PER I-PER\n\n")
  assert tm.main([path, "--strict"]) == 1
  assert "look like IOB1" in capsys.readouterr().err
  with pytest.raises(SystemExit) as e:
    tm.main([path, "--scheme", "iob2"])
  assert e.value.code == 2


@pytest.mark.slow
def test_module_runs_without_tensorflow(tmp_path):
  path = write(tmp_path / "p.txt", CLI_TEXT)
  env = dict(os.environ, PYTHONPATH=REPO_ROOT)
  code = ("import sys\nfrom bert_tf.tasks.tagging import metrics as tm\n"
          "status = tm.main(sys.argv[1:])\nassert 'tensorflow' not in sys.modules\n"
          "sys.exit(status)\n")
  result = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True,
                          env=env, check=False)
  assert result.returncode == 0, result.stderr
  assert result.stdout == CLI_REPORT
  result = subprocess.run([sys.executable, "-m", "bert_tf.tasks.tagging.metrics", path],
                          capture_output=True, text=True, env=env, check=False)
  assert result.stdout == CLI_REPORT


# === Properties: the library against conlleval_reference ===

SANE_TAGS = ["O", "B-PER", "I-PER", "E-PER", "S-PER", "B-LOC", "I-LOC", "E-LOC", "S-LOC",
             "B-ORG-X", "I-ORG-X"]
ODD_TAGS = ["B", "I", "E", "S", "[", "]", ".", ".-PER", ".-LOC", "NN", "O-PER", "-LRB-", "B-0",
            "I-0", "B-", "X-PER", "I-\u00e9", "S-\u00e9"]
BIO_TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B", "I", "B-0", "B-A-B", "I-A-B",
            "O-PER", "B-", "B-\u00e9"]
EIO_TAGS = ["O", "E-PER", "I-PER", "E-LOC", "I-LOC", "E", "I"]
DENSE_TAGS = ["O", "B-X", "I-X", "E-X", "S-X", "I-Y", ".-Y", "B", "I", ".", ".-X", "NN", "]"]


def corpora(tags):
  """(gold, predicted) sentences: random tags cut into sentences at random points.

  A predicted tag copies the gold tag 3 times in 4, so that predicted chunks often agree with
  gold ones for a while (the paths of conlleval's "correct so far" state).
  """
  tag = st.sampled_from(tags)

  def cut(tokens):
    gold, predicted, gold_sentence, predicted_sentence = [], [], [], []
    for gold_tag, other_tag, copy, ends_sentence in tokens:
      gold_sentence.append(gold_tag)
      predicted_sentence.append(gold_tag if copy else other_tag)
      if ends_sentence:
        gold.append(gold_sentence)
        predicted.append(predicted_sentence)
        gold_sentence, predicted_sentence = [], []
    if gold_sentence:
      gold.append(gold_sentence)
      predicted.append(predicted_sentence)
    return gold, predicted

  copy = st.integers(0, 3).map(bool)
  return st.lists(st.tuples(tag, tag, copy, st.booleans()), max_size=30).map(cut)


def assert_equals_reference(gold, predicted, rules):
  scores = tm.evaluate(gold, predicted)
  state, report = ref.conlleval(conll_lines(gold, predicted), rules=rules)
  assert counts(scores) == (state["tokens"], state["correct_tags"], state["found_correct"],
                            state["found_guessed"], state["correct_chunk"])
  types = set(state["found_correct_by_type"]) | set(state["found_guessed_by_type"])
  assert per_type_counts(scores) == {
      t: (state["found_correct_by_type"].get(t, 0), state["found_guessed_by_type"].get(t, 0),
          state["correct_chunk_by_type"].get(t, 0)) for t in types}
  assert tm.conlleval_report(scores) == report


@settings(max_examples=200, deadline=None)
@given(corpora(SANE_TAGS * 3 + ODD_TAGS))
def test_equals_the_extended_reference(corpus):
  assert_equals_reference(*corpus, rules="extended")


@settings(max_examples=200, deadline=None)
@given(corpora(DENSE_TAGS))
def test_equals_the_extended_reference_on_a_small_odd_tag_set(corpus):
  # Few tags, so that odd neighbours ("B ." then "B-X", ".-X" inside a chunk) come up often.
  assert_equals_reference(*corpus, rules="extended")


@settings(max_examples=150, deadline=None)
@given(st.one_of(corpora(BIO_TAGS), corpora(EIO_TAGS)))
def test_equals_conlleval_pl_on_iob_and_ioe_tags(corpus):
  assert_equals_reference(*corpus, rules="original")


@pytest.fixture(scope="module")
def file_dir(tmp_path_factory):
  return tmp_path_factory.mktemp("tagging_files")


@settings(max_examples=100, deadline=None)
@given(corpora(SANE_TAGS + ODD_TAGS),
       st.lists(st.sampled_from(["", "", "-X- x y", "-X- -X- -X-"]), min_size=30, max_size=30),
       st.booleans())
def test_files_equal_the_reference(file_dir, corpus, separators, leading_blank):
  # Read through read_conll_predictions, separated by empty or "-X-" lines.
  gold, predicted = corpus
  lines = [""] if leading_blank else []
  for i, (gold_tags, predicted_tags) in enumerate(zip(gold, predicted)):
    lines += [f"w {g} {p}" for g, p in zip(gold_tags, predicted_tags)]
    lines.append(separators[i])
  path = write(file_dir / "p.txt", "".join(line + "\n" for line in lines))
  _, report = ref.conlleval(lines)
  assert tm.conlleval_report(tm.evaluate(*tm.read_conll_predictions(path))) == report
  assert tm.read_conll_predictions(path) == (gold, predicted)


@settings(max_examples=200, deadline=None)
@given(corpora(SANE_TAGS))
def test_counts_equal_exact_matches_of_entities_for_bioes_tags(corpus):
  gold, predicted = corpus
  scores = tm.evaluate(gold, predicted)
  gold_spans = [set(tm.entities(tags)) for tags in gold]
  predicted_spans = [set(tm.entities(tags)) for tags in predicted]
  assert scores["gold_entities"] == sum(len(s) for s in gold_spans)
  assert scores["predicted_entities"] == sum(len(s) for s in predicted_spans)
  assert scores["correct_entities"] == sum(len(g & p)
                                           for g, p in zip(gold_spans, predicted_spans))


# === Properties: the strict mode against its definition ===


def brute_force_strict(tags, scheme):
  """Every span [s, e) that is an entity by the scheme's definition, checked one by one."""
  found = []
  n = len(tags)
  for s in range(n):
    for e in range(s + 1, n + 1):
      if not tags[s].startswith(("B-", "S-")):
        continue
      kind = tags[s][2:]
      inner = tags[s + 1:e]
      if scheme == "iob2":
        ok = (tags[s] == "B-" + kind and all(t == "I-" + kind for t in inner) and
              (e == n or tags[e] != "I-" + kind))
      elif e == s + 1:
        ok = tags[s] == "S-" + kind
      else:
        ok = (tags[s] == "B-" + kind and all(t == "I-" + kind for t in inner[:-1]) and
              inner[-1] == "E-" + kind)
      if ok:
        found.append((kind, s, e))
  return sorted(found, key=lambda span: span[1])


IOB2_TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
IOBES_TAGS = IOB2_TAGS + ["E-PER", "S-PER", "E-LOC", "S-LOC"]


@settings(max_examples=200, deadline=None)
@given(st.one_of(corpora(IOB2_TAGS).map(lambda c: ("iob2", c)),
                 corpora(IOBES_TAGS).map(lambda c: ("iobes", c))))
def test_strict_equals_its_definition(case):
  scheme, (gold, predicted) = case
  found_gold = found_predicted = found_correct = 0
  for gold_tags, predicted_tags in zip(gold, predicted):
    gold_spans = brute_force_strict(gold_tags, scheme)
    predicted_spans = brute_force_strict(predicted_tags, scheme)
    assert tm.entities(gold_tags, "strict", scheme) == gold_spans
    found_gold += len(gold_spans)
    found_predicted += len(predicted_spans)
    found_correct += len(set(gold_spans) & set(predicted_spans))
  scores = tm.evaluate(gold, predicted, mode="strict", scheme=scheme)
  assert (scores["gold_entities"], scores["predicted_entities"],
          scores["correct_entities"]) == (found_gold, found_predicted, found_correct)


def well_formed(scheme):
  """Sentences of valid IOB2 / IOBES tags, built from entity lengths (0 = an "O")."""
  def tags_of(pieces):
    tags = []
    for kind, length in pieces:
      if length == 0:
        tags.append("O")
      elif scheme == "iobes" and length == 1:
        tags.append("S-" + kind)
      elif scheme == "iobes":
        tags += ["B-" + kind] + ["I-" + kind] * (length - 2) + ["E-" + kind]
      else:
        tags += ["B-" + kind] + ["I-" + kind] * (length - 1)
    return tags
  piece = st.tuples(st.sampled_from(["PER", "LOC"]), st.integers(0, 4))
  return st.lists(st.lists(piece, max_size=6).map(tags_of), max_size=4)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["iob2", "iobes"]).flatmap(
    lambda scheme: st.tuples(st.just(scheme), well_formed(scheme))))
def test_strict_and_conlleval_agree_on_well_formed_tags(case):
  scheme, sentences = case
  for tags in sentences:
    assert tm.entities(tags, "strict", scheme) == tm.entities(tags)
