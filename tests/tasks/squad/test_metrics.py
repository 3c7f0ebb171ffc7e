"""bert_tf.tasks.squad.metrics against the rules of the official SQuAD evaluation scripts.

Golden numbers are worked out by hand in the comments next to each case, on small hand-made
datasets. A plain re-derivation of the scoring rules at the bottom (token counting written
out, no shared helpers) is compared with the module on generated datasets.
"""

import collections
import json
import logging
import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from bert_tf.tasks.squad import metrics as sm
from tests.helpers import REPO_ROOT


def qa(qid, *answers):
  return {"id": qid, "question": f"question {qid}?",
          "answers": [{"text": a, "answer_start": 0} for a in answers]}


def article(*qas):
  return {"title": "t", "paragraphs": [{"context": "some context", "qas": list(qas)}]}


def write_json(path, obj):
  with open(path, "w", encoding="utf-8") as f:
    json.dump(obj, f)
  return str(path)


# === normalize_answer ===


@pytest.mark.parametrize("text, expected", [
    ("The Quick, Brown Fox!", "quick brown fox"),    # lower, punctuation, article
    ("an apple a day", "apple day"),                 # every article, whole words only
    ("A cat", "cat"),                                # lowercased before the articles go
    ("theater another anthem", "theater another anthem"),  # not inside words
    ("don't", "dont"),                               # punctuation removed, not split
    ("U.S.A.", "usa"),
    ("the-end", "theend"),                           # punctuation first: no word "the" left
    ("(a) test", "test"),
    ("  red\t\tdog \n barked ", "red dog barked"),   # whitespace collapsed
    ("\u00bfQu\u00e9?", "\u00bfqu\u00e9"),            # only ASCII punctuation is removed
    ("the\u00e9", "the\u00e9"),                      # unicode \b: e-acute is a word char
    ("the", ""),
    ("", ""),
])
def test_normalize_answer(text, expected):
  assert sm.normalize_answer(text) == expected


def test_get_tokens():
  assert sm.get_tokens("") == []
  assert sm.get_tokens("The red, red dog.") == ["red", "red", "dog"]
  assert sm.get_tokens("a an the") == []


# === Per-answer scores ===


def test_partial_overlap_f1():
  # pred "the big red dog" -> [big, red, dog]; gold "a red dog barked" -> [red, dog, barked].
  # common = {red, dog} = 2; P = 2/3, R = 2/3; F1 = 2 * (4/9) / (4/3) = 2/3.
  assert sm.f1_score_v1("the big red dog", "a red dog barked") == pytest.approx(2 / 3)
  assert sm.compute_f1_v2("a red dog barked", "the big red dog") == pytest.approx(2 / 3)
  assert not sm.exact_match_score_v1("the big red dog", "a red dog barked")
  assert sm.compute_exact_v2("a red dog barked", "the big red dog") == 0


def test_f1_counts_tokens_as_a_multiset():
  # pred [red, red, red] vs gold [red]: common = min(3, 1) = 1; P = 1/3, R = 1;
  # F1 = 2 * (1/3) / (4/3) = 1/2.
  assert sm.f1_score_v1("red red red", "red") == pytest.approx(0.5)
  assert sm.compute_f1_v2("red", "red red red") == pytest.approx(0.5)
  # [dog] vs [cat]: nothing shared -> 0.
  assert sm.f1_score_v1("dog", "cat") == 0
  assert sm.compute_f1_v2("cat", "dog") == 0


def test_exact_match_ignores_case_punctuation_articles_and_spaces():
  assert sm.exact_match_score_v1("The  Denver Broncos!", "denver broncos")
  assert sm.compute_exact_v2("denver broncos", "The  Denver Broncos!") == 1


def test_empty_answers_v1_versus_v2():
  # v1.1: both sides normalize to nothing -> EM true, but F1 = 0 (num_same == 0).
  assert sm.exact_match_score_v1("the", "a")
  assert sm.f1_score_v1("the", "a") == 0
  assert sm.f1_score_v1("", "") == 0
  # v2.0: an empty side gives F1 = int(both empty).
  assert sm.compute_f1_v2("", "the") == 1
  assert sm.compute_f1_v2("", "") == 1
  assert sm.compute_f1_v2("", "dog") == 0
  assert sm.compute_f1_v2("dog", "") == 0
  assert sm.compute_exact_v2("", "An.") == 1
  assert sm.compute_exact_v2("", "dog") == 0


# === v1.1 ===


V1_DATASET = [
    article(qa("q1", "Denver Broncos", "the Denver Broncos"),
            qa("q2", "paris.")),
    article(qa("q3", "red dog", "big red dog", "cat")),
    article(qa("q4", "1990")),
]


def test_evaluate_v1_golden(caplog):
  predictions = {"q1": "Broncos", "q2": "Paris", "q3": "the big red dog"}
  # q1: golds normalize to "denver broncos" both; EM 0; F1: pred [broncos] vs [denver, broncos]:
  #     P = 1, R = 1/2, F1 = 2/3 (same for both golds).
  # q2: "paris" == "paris" -> EM 1, F1 1.
  # q3: max over golds: "big red dog" matches exactly -> EM 1, F1 1 (the "red dog" gold would
  #     give F1 0.8 and "cat" 0).
  # q4: no prediction -> 0 and 0, but it still counts in the total of 4.
  # exact_match = 100 * 2 / 4 = 50; f1 = 100 * (2/3 + 1 + 1) / 4 = 66.666...
  with caplog.at_level(logging.WARNING):
    result = sm.evaluate_v1(V1_DATASET, predictions)
  assert list(result) == ["exact_match", "f1"]
  assert result["exact_match"] == 50.0
  assert result["f1"] == pytest.approx(200 / 3)
  assert "Unanswered question q4 will receive score 0." in caplog.text


def test_evaluate_v1_max_over_golds_takes_the_best_f1():
  # gold "red dog": pred [big, red, dog] vs [red, dog]: P = 2/3, R = 1, F1 = 0.8;
  # gold "cat": 0. Max = 0.8; EM 0.
  dataset = [article(qa("q", "red dog", "cat"))]
  result = sm.evaluate_v1(dataset, {"q": "big red dog"})
  assert result == {"exact_match": 0.0, "f1": pytest.approx(80.0)}


def test_evaluate_v1_all_missing_scores_zero():
  assert sm.evaluate_v1(V1_DATASET, {}) == {"exact_match": 0.0, "f1": 0.0}


def test_evaluate_v1_question_without_answers_is_an_error():
  with pytest.raises(ValueError, match="q9.*no gold answers"):
    sm.evaluate_v1([article(qa("q9"))], {"q9": ""})


# === v2.0 ===


V2_DATASET = [
    article(qa("q1", "Denver Broncos"),
            qa("q2", "the"),             # raw answers non-empty: answerable, gold becomes [""]
            qa("q3")),                   # unanswerable
    article(qa("q4"),                    # unanswerable
            qa("q5", "Paris", "the")),   # "the" is dropped: gold ["Paris"]
]
V2_PREDICTIONS = {"q1": "Denver", "q2": "", "q3": "", "q4": "something", "q5": "paris"}
# Per question (EM, F1), by hand:
#   q1 answerable: pred [denver] vs [denver, broncos]: P = 1, R = 1/2 -> (0, 2/3)
#   q2 answerable (raw list non-empty), gold [""], pred "" -> (1, 1)
#   q3 unanswerable, pred "" -> (1, 1)
#   q4 unanswerable, pred "something" -> (0, 0)
#   q5 answerable, gold ["Paris"], pred "paris" -> (1, 1)


def test_evaluate_v2_golden_with_splits():
  result = sm.evaluate_v2(V2_DATASET, V2_PREDICTIONS)
  assert list(result) == ["exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total",
                          "NoAns_exact", "NoAns_f1", "NoAns_total"]
  assert isinstance(result, collections.OrderedDict)
  # exact = 100 * 3/5 = 60; f1 = 100 * (2/3 + 3) / 5 = 73.33...
  assert result["exact"] == 60.0
  assert result["f1"] == pytest.approx(100 * (11 / 3) / 5)
  assert result["total"] == 5
  # HasAns = q1, q2, q5: exact 100 * 2/3, f1 100 * (2/3 + 2) / 3 = 88.88...
  assert result["HasAns_exact"] == pytest.approx(200 / 3)
  assert result["HasAns_f1"] == pytest.approx(800 / 9)
  assert result["HasAns_total"] == 3
  # NoAns = q3, q4: exact 50, f1 50.
  assert (result["NoAns_exact"], result["NoAns_f1"], result["NoAns_total"]) == (50.0, 50.0, 2)


def test_evaluate_v2_without_unanswerable_questions_has_no_noans_keys():
  dataset = [article(qa("a", "yes"), qa("b", "no"))]
  result = sm.evaluate_v2(dataset, {"a": "yes", "b": "maybe"})
  assert list(result) == ["exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total"]
  assert (result["exact"], result["f1"], result["total"]) == (50.0, 50.0, 2)


def test_evaluate_v2_missing_prediction_is_skipped(caplog):
  dataset = V2_DATASET + [article(qa("q6", "Berlin"))]
  with caplog.at_level(logging.WARNING):
    result = sm.evaluate_v2(dataset, V2_PREDICTIONS)
  # q6 is not counted: the same numbers as without it (v1.1 would count it as 0).
  assert result == sm.evaluate_v2(V2_DATASET, V2_PREDICTIONS)
  assert result["total"] == 5 and result["HasAns_total"] == 3
  assert "Missing prediction for q6" in caplog.text


def test_evaluate_v2_na_prob_threshold_on_logit_differences():
  # BERT's null_odds: logit differences, so the default threshold 1.0 does act on them.
  na_probs = {"q1": 2.5, "q2": -3.0, "q3": 1.0, "q4": 5.0, "q5": 0.5}
  result = sm.evaluate_v2(V2_DATASET, V2_PREDICTIONS, na_probs=na_probs)
  # Above 1.0: q1 (2.5, answerable -> 0.0, its F1 2/3 is lost) and q4 (5.0, unanswerable ->
  # 1.0, although it predicted "something"). q3 at exactly 1.0 is not above: keeps 1.
  # exact: q1 0, q2 1, q3 1, q4 1, q5 1 -> 80; f1 the same -> 80.
  assert (result["exact"], result["f1"], result["total"]) == (80.0, 80.0, 5)
  # HasAns q1, q2, q5: 2/3 for both; NoAns q3, q4: 100 for both.
  assert result["HasAns_exact"] == pytest.approx(200 / 3)
  assert result["HasAns_f1"] == pytest.approx(200 / 3)
  assert (result["NoAns_exact"], result["NoAns_f1"]) == (100.0, 100.0)
  # find_best_thresh on the RAW scores. No-answer questions: q3, q4 -> start at 2, thresh 0.0.
  # Ascending na_prob: q2 (-3.0), q5 (0.5), q3 (1.0), q1 (2.5), q4 (5.0).
  #   EM: q2 +1 -> 3 (best, -3.0); q5 +1 -> 4 (best, 0.5); q3 pred "" +0 -> 4; q1 +0 -> 4;
  #       q4 pred "something" -1 -> 3.  best_exact = 100 * 4/5 = 80 at 0.5.
  #   F1: q2 -> 3 (-3.0); q5 -> 4 (0.5); q3 -> 4; q1 +2/3 -> 4.667 (best, 2.5); q4 -> 3.667.
  #       best_f1 = 100 * (4 + 2/3) / 5 = 93.33 at 2.5.
  assert list(result)[-4:] == ["best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"]
  assert (result["best_exact"], result["best_exact_thresh"]) == (80.0, 0.5)
  assert result["best_f1"] == pytest.approx(100 * (14 / 3) / 5)
  assert result["best_f1_thresh"] == 2.5


def test_evaluate_v2_without_na_probs_every_na_prob_is_zero():
  # The official default {qid: 0.0}: a negative threshold makes every prediction a no-answer.
  # Then only the unanswerable q3, q4 score: exact = f1 = 100 * 2/5 = 40. No best_* keys.
  result = sm.evaluate_v2(V2_DATASET, V2_PREDICTIONS, na_prob_thresh=-1.0)
  assert (result["exact"], result["f1"]) == (40.0, 40.0)
  assert "best_exact" not in result


def test_evaluate_v2_na_probs_must_cover_the_predictions():
  with pytest.raises(ValueError, match="q5"):
    sm.evaluate_v2(V2_DATASET, V2_PREDICTIONS, na_probs={"q1": 0.0, "q2": 0.0, "q3": 0.0,
                                                          "q4": 0.0})


def test_evaluate_v2_no_predictions_at_all():
  result = sm.evaluate_v2(V2_DATASET, {})
  assert (result["exact"], result["f1"], result["total"]) == (0.0, 0.0, 0)


# === find_best_thresh ===


def test_find_best_thresh_hand_worked():
  # Four questions; u1, u2 unanswerable, h1, h2 answerable.
  preds = {"h1": "x", "h2": "y", "u1": "", "u2": "wrong"}
  scores = {"h1": 0.5, "h2": 1.0, "u1": 1.0, "u2": 0.0}   # raw F1
  na_probs = {"h1": -4.0, "u2": -2.0, "h2": -1.0, "u1": 3.0, "other": -9.0}
  has_ans = {"h1": True, "h2": True, "u1": False, "u2": False}
  # Start: 2 (the two unanswerable right by answering nothing), thresh 0.0.
  # Ascending: other (-9.0, not scored: skipped); h1 (-4.0) +0.5 -> 2.5 (best, -4.0);
  # u2 (-2.0) "wrong" -1 -> 1.5; h2 (-1.0) +1 -> 2.5 (not above 2.5); u1 (3.0) "" +0 -> 2.5.
  # best = 100 * 2.5 / 4 = 62.5 at -4.0.
  assert sm.find_best_thresh(preds, scores, na_probs, has_ans) == (62.5, -4.0)


def test_find_best_thresh_answering_nothing_can_be_best():
  # One unanswerable question predicted " ": the raw text is truthy, so -1 although it
  # normalizes to nothing (its raw EM is 1). Start 1 -> 0: the best stays 1 at 0.0 -> 100.
  assert sm.find_best_thresh({"a": " "}, {"a": 1}, {"a": 0.1}, {"a": False}) == (100.0, 0.0)


def test_find_best_thresh_ties_follow_na_probs_order():
  # Equal na_probs keep the order of the na_probs dict (a stable sort). Start: 1 (a is
  # unanswerable), thresh 0.0.
  # b first: b +1 -> 2 (best, 0.3); a "x" -1 -> 1. Best 2 of 2 questions -> 100 at 0.3.
  # a first: a -1 -> 0; b +1 -> 1, never above the start 1 -> 50 at 0.0.
  preds, scores = {"a": "x", "b": "y"}, {"a": 0, "b": 1}
  has_ans = {"a": False, "b": True}
  assert sm.find_best_thresh(preds, scores, {"b": 0.3, "a": 0.3}, has_ans) == (100.0, 0.3)
  assert sm.find_best_thresh(preds, scores, {"a": 0.3, "b": 0.3}, has_ans) == (50.0, 0.0)


# === Files, errors and the command line ===


@pytest.fixture
def v2_files(tmp_path):
  data = write_json(tmp_path / "dev-v2.0.json", {"version": "v2.0", "data": V2_DATASET})
  preds = write_json(tmp_path / "predictions.json", V2_PREDICTIONS)
  odds = write_json(tmp_path / "null_odds.json",
                    {"q1": 2.5, "q2": -3.0, "q3": 1.0, "q4": 5.0, "q5": 0.5})
  return data, preds, odds


@pytest.fixture
def v1_files(tmp_path):
  data = write_json(tmp_path / "dev-v1.1.json", {"version": "1.1", "data": V1_DATASET})
  preds = write_json(tmp_path / "predictions-v1.1.json",
                     {"q1": "Broncos", "q2": "Paris", "q3": "the big red dog"})
  return data, preds


def test_evaluate_file_picks_the_version(v1_files, v2_files):
  assert sm.evaluate_file(*v1_files) == sm.evaluate_v1(
      V1_DATASET, {"q1": "Broncos", "q2": "Paris", "q3": "the big red dog"})
  data, preds, odds = v2_files
  assert sm.evaluate_file(data, preds) == sm.evaluate_v2(V2_DATASET, V2_PREDICTIONS)
  with_odds = sm.evaluate_file(data, preds, na_prob_file=odds)
  assert with_odds["best_f1_thresh"] == 2.5 and with_odds["exact"] == 80.0
  # An explicit version overrides the dataset's field: the v1.1 file as 2.0 skips the missing
  # q4 (total 3); the v2.0 file as 1.1 fails on its unanswerable questions.
  assert sm.evaluate_file(*v1_files, version="2.0")["total"] == 3
  with pytest.raises(ValueError, match="q3 has no gold answers"):
    sm.evaluate_file(data, preds, version="1.1")


def test_evaluate_file_version_field_variants(tmp_path):
  preds = write_json(tmp_path / "p.json", {"a": "yes"})
  for version, keys in (("2.0", "exact"), ("v2.0", "exact"), ("1.1", "exact_match"),
                        ("v1.1", "exact_match"), ("3", "exact_match")):
    data = write_json(tmp_path / "d.json", {"version": version, "data": [article(qa("a", "yes"))]})
    assert keys in sm.evaluate_file(data, preds), version
  data = write_json(tmp_path / "d.json", {"data": [article(qa("a", "yes"))]})
  assert sm.evaluate_file(data, preds) == {"exact_match": 100.0, "f1": 100.0}


def test_evaluate_file_errors_name_the_file_and_key(tmp_path, v2_files):
  data, preds, _ = v2_files
  bad = tmp_path / "broken.json"
  bad.write_text('{"data": [', encoding="utf-8")
  with pytest.raises(ValueError, match=r"broken\.json.*not valid JSON"):
    sm.evaluate_file(str(bad), preds)
  with pytest.raises(ValueError, match=r"broken\.json.*not valid JSON"):
    sm.evaluate_file(data, str(bad))
  with pytest.raises(ValueError, match=r"broken\.json.*not valid JSON"):
    sm.evaluate_file(data, preds, na_prob_file=str(bad))
  no_data = write_json(tmp_path / "no_data.json", {"version": "v2.0", "articles": []})
  with pytest.raises(ValueError, match=r"no_data\.json.*\"data\""):
    sm.evaluate_file(no_data, preds)
  no_id = write_json(tmp_path / "no_id.json",
                     {"version": "v2.0", "data": [article({"answers": []})]})
  with pytest.raises(ValueError, match=r"no_id\.json.*qas\[0\] has no \"id\""):
    sm.evaluate_file(no_id, preds)
  listed = write_json(tmp_path / "listed.json", ["q1", "q2"])
  with pytest.raises(ValueError, match=r"listed\.json.*predictions must be"):
    sm.evaluate_file(data, listed)
  numbers = write_json(tmp_path / "numbers.json", {"q1": 3})
  with pytest.raises(ValueError, match=r"numbers\.json.*'q1'"):
    sm.evaluate_file(data, numbers)
  odds_text = write_json(tmp_path / "odds_text.json", {"q1": "high"})
  with pytest.raises(ValueError, match=r"odds_text\.json.*'q1'"):
    sm.evaluate_file(data, preds, na_prob_file=odds_text)
  with pytest.raises(ValueError, match="SQuAD 2.0"):
    sm.evaluate_file(data, preds, na_prob_file=odds_text, version="1.1")
  with pytest.raises(ValueError, match="unknown SQuAD version"):
    sm.evaluate_file(data, preds, version="3.0")


def test_evaluate_functions_check_their_inputs():
  with pytest.raises(ValueError, match="\"id\""):
    sm.evaluate_v1([article({"answers": [{"text": "x"}]})], {})
  with pytest.raises(ValueError, match="\"answers\""):
    sm.evaluate_v2([article({"id": "x"})], {})
  with pytest.raises(ValueError, match="predictions must map"):
    sm.evaluate_v2(V2_DATASET, {"q1": None})
  with pytest.raises(ValueError, match="na_probs must map"):
    sm.evaluate_v2(V2_DATASET, V2_PREDICTIONS, na_probs={"q1": True})


def test_cli_v1_prints_one_line(v1_files, capsys):
  assert sm.main(list(v1_files)) == 0
  out = capsys.readouterr().out
  expected = sm.evaluate_file(*v1_files)
  assert out == json.dumps(expected) + "\n"
  assert json.loads(out)["exact_match"] == 50.0


def test_cli_v2_prints_indented_and_writes_out_file(v2_files, tmp_path, capsys):
  data, preds, odds = v2_files
  out_file = tmp_path / "out" / "eval.json"
  argv = [data, preds, "--na-prob-file", odds, "--na-prob-thresh", "1.0",
          "--out-file", str(out_file)]
  assert sm.main(argv) == 0
  expected = sm.evaluate_v2(V2_DATASET, V2_PREDICTIONS,
                            na_probs={"q1": 2.5, "q2": -3.0, "q3": 1.0, "q4": 5.0, "q5": 0.5})
  assert capsys.readouterr().out == json.dumps(expected, indent=2) + "\n"
  written = json.loads(out_file.read_text(encoding="utf-8"))
  assert written == expected and list(written) == list(expected)
  assert not [n for n in os.listdir(out_file.parent) if ".incomplete-" in n]


def test_cli_threshold_and_version_flags(v2_files, capsys):
  data, preds, _ = v2_files
  assert sm.main([data, preds, "--na-prob-thresh", "-1"]) == 0
  assert json.loads(capsys.readouterr().out)["exact"] == 40.0
  # As v1.1, the unanswerable q3 (no gold answers) is an error.
  assert sm.main([data, preds, "--version", "1.1"]) == 1
  captured = capsys.readouterr()
  assert captured.out == ""
  assert "no gold answers" in captured.err


def test_cli_reports_malformed_json_with_the_file_name(tmp_path, v2_files, capsys):
  bad = tmp_path / "broken.json"
  bad.write_text("not json", encoding="utf-8")
  assert sm.main([str(bad), v2_files[1]]) == 1
  captured = capsys.readouterr()
  assert captured.out == ""
  assert str(bad) in captured.err and "not valid JSON" in captured.err
  assert sm.main([v2_files[0], str(tmp_path / "absent.json")]) == 1
  assert "absent.json" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_runs_as_a_module(v1_files):
  run = subprocess.run([sys.executable, "-m", "bert_tf.tasks.squad.metrics", *v1_files],
                       cwd=REPO_ROOT, capture_output=True, text=True, check=True)
  assert json.loads(run.stdout)["exact_match"] == 50.0
  assert "Unanswered question q4" in run.stderr


# === Properties ===

WORDS = st.sampled_from(["a", "an", "the", "The", "dog", "Dog", "red", "cat", "x", "é", "",
                         ",", ".", "'s", "!", "An", "the-end"])
ANSWERS = st.lists(WORDS, max_size=6).map(" ".join) | st.text(max_size=12)


@settings(max_examples=300, deadline=None)
@given(ANSWERS, ANSWERS)
def test_exact_match_implies_full_f1(a, b):
  if sm.exact_match_score_v1(a, b) and sm.normalize_answer(a):
    assert sm.f1_score_v1(a, b) == 1
    assert sm.compute_f1_v2(a, b) == 1
  if sm.compute_exact_v2(a, b):
    assert sm.compute_f1_v2(a, b) == 1  # v2: also when both normalize to nothing


@settings(max_examples=300, deadline=None)
@given(ANSWERS, ANSWERS)
def test_scores_are_symmetric_and_bounded(a, b):
  assert sm.compute_f1_v2(a, b) == sm.compute_f1_v2(b, a)
  assert sm.compute_exact_v2(a, b) == sm.compute_exact_v2(b, a)
  assert sm.f1_score_v1(a, b) == sm.f1_score_v1(b, a)
  assert 0 <= sm.compute_f1_v2(a, b) <= 1


# === A plain re-derivation, compared on generated datasets ===


def _reference_f1(pred_tokens, gold_tokens):
  shared = 0
  remaining = list(gold_tokens)
  for token in pred_tokens:
    if token in remaining:
      remaining.remove(token)
      shared += 1
  if shared == 0:
    return 0.0
  p, r = shared / len(pred_tokens), shared / len(gold_tokens)
  return 2 * p * r / (p + r)


def _reference_v1(questions, preds):
  em = f1 = 0.0
  for qid, golds in questions:
    if qid in preds:
      p = sm.normalize_answer(preds[qid])
      em += max(float(p == sm.normalize_answer(g)) for g in golds)
      f1 += max(_reference_f1(p.split(), sm.normalize_answer(g).split()) for g in golds)
  return 100 * em / len(questions), 100 * f1 / len(questions)


def _reference_v2(questions, preds, na_probs, thresh):
  """(exact, f1, total, best_f1, best_f1_thresh) the long way."""
  rows = []  # (qid, answerable, raw em, raw f1)
  for qid, golds in questions:
    if qid not in preds:
      continue
    kept = [sm.normalize_answer(g) for g in golds if sm.normalize_answer(g)] or [""]
    p = sm.normalize_answer(preds[qid])
    em = max(float(p == g) for g in kept)
    f1 = max(float(p.split() == g.split()) if not (p and g) else
             _reference_f1(p.split(), g.split()) for g in kept)
    rows.append((qid, bool(golds), em, f1))
  scored = [(em, f1) if na_probs[qid] <= thresh else (float(not has), float(not has))
            for qid, has, em, f1 in rows]
  n = len(rows)
  # Best threshold: try "answer nothing" and each na_prob as the cut, answering questions
  # whose na_prob is at or below it, in the official sweep order.
  order = sorted(range(n), key=lambda i: na_probs[rows[i][0]])
  no_ans = sum(1 for _, golds in questions if not golds)
  best, best_t, running = no_ans, 0.0, no_ans
  for i in order:
    qid, has, _, f1 = rows[i]
    running += f1 if has else (-1 if preds[qid] else 0)
    if running > best:
      best, best_t = running, na_probs[qid]
  return (100 * sum(e for e, _ in scored) / n, 100 * sum(f for _, f in scored) / n, n,
          100 * best / n, best_t)


QUESTIONS = st.lists(st.lists(ANSWERS, max_size=3), min_size=1, max_size=8)


@settings(max_examples=150, deadline=None)
@given(QUESTIONS, st.data())
def test_matches_a_plain_re_derivation(golds_per_question, data):
  questions = [(f"q{i}", golds) for i, golds in enumerate(golds_per_question)]
  dataset = [article(*[qa(qid, *golds) for qid, golds in questions])]
  answered = [qid for qid, _ in questions if data.draw(st.booleans())]
  preds = {qid: data.draw(ANSWERS) for qid in answered}
  na_probs = {qid: data.draw(st.sampled_from([-2.0, -0.5, 0.0, 1.0, 1.5, 3.0]))
              for qid in answered}
  thresh = data.draw(st.sampled_from([-1.0, 0.0, 1.0, 2.0]))

  if all(golds for _, golds in questions):
    em, f1 = _reference_v1(questions, preds)
    result = sm.evaluate_v1(dataset, preds)
    assert result["exact_match"] == pytest.approx(em, abs=1e-9)
    assert result["f1"] == pytest.approx(f1, abs=1e-9)

  if answered:
    exact, f1, total, best_f1, best_t = _reference_v2(questions, preds, na_probs, thresh)
    result = sm.evaluate_v2(dataset, preds, na_probs=na_probs, na_prob_thresh=thresh)
    assert result["total"] == total
    assert result["exact"] == pytest.approx(exact, abs=1e-9)
    assert result["f1"] == pytest.approx(f1, abs=1e-9)
    assert result["best_f1"] == pytest.approx(best_f1, abs=1e-9)
    assert result["best_f1_thresh"] == best_t
