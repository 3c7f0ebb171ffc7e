"""The official SQuAD evaluation scripts (evaluate-v1.1.py and evaluate-v2.0.py), in the package.

The numbers equal the official scripts' exactly: the same normalization, the same per-question
scores, the same questions counted and the same order of summation (v1.1 adds question by
question with `+=`, v2.0 with the builtin `sum` over dicts in dataset order; under one Python the
floats are therefore bit-identical).

Both versions normalize an answer the same way (`normalize_answer`): lowercase, remove every
character of `string.punctuation` (ASCII only), replace the whole words a / an / the by a space,
collapse whitespace. Exact match (EM) compares normalized strings; F1 compares the normalized
whitespace tokens as multisets: P = common / |pred|, R = common / |gold|, F1 = 2PR / (P + R).
Every question takes the maximum over its gold answers, and the results are percentages.

Where the versions differ:

* Missing predictions. v1.1 counts every question of the dataset; one without a prediction
  scores 0 (logged "Unanswered question <id> will receive score 0."). v2.0 skips it (logged
  "Missing prediction for <id>"): the totals cover only the predicted questions.
* Empty answers. v1.1's F1 is 0 whenever nothing is shared, even when both sides normalize to
  nothing (`f1_score_v1("the", "a") == 0`, while their EM is 1). v2.0 first drops gold answers
  that normalize to nothing; a question left without gold answers (an unanswerable one) gets
  the single gold answer "", and F1 with an empty side is 1 if both are empty, else 0. So the
  prediction "" is right, with EM = F1 = 1, exactly for the unanswerable questions.
* Whether a question is answerable (HasAns / NoAns) is, in v2.0, whether its raw "answers" list
  is non-empty, before the empty-normalizing answers are dropped.
* The no-answer threshold (v2.0 only). With na_probs (the script's --na-prob-file), a question
  whose na_prob > na_prob_thresh (default 1.0) is scored as if it predicted no-answer: 1 if it is
  unanswerable, else 0. The name says probability, but BERT's null_odds.json holds logit
  differences (null score minus best non-null score, unbounded, typically -10..10), so the
  default 1.0 does act on them. Without na_probs every na_prob is 0.0 (so a negative threshold
  turns every prediction into no-answer, as in the official script). With na_probs the output
  also has best_exact / best_f1 and their thresholds (`find_best_thresh`): the scores reached
  by the best threshold on the raw predictions, the value BERT's README recipe then passes as
  --null_score_diff_threshold.

Where the official scripts crash, this module does something defined instead: malformed files
give a ValueError naming the file and the key; v1.1 on a question without gold answers (max of
nothing) raises a ValueError naming it; v2.0 with a missing prediction restricts the
HasAns / NoAns splits to the predicted questions (the official script raises KeyError there);
no predicted question at all gives 0.0 scores and total 0 (a division by zero in the official
script); a predicted question absent from na_probs raises a ValueError (KeyError there). The
precision-recall curves of the v2.0 script (--out-image-dir) are not implemented.

Command line (argparse):
  python -m bert_tf.tasks.squad.metrics data.json predictions.json [--na-prob-file null_odds.json]
      [--na-prob-thresh 1.0] [--version 1.1|2.0] [--out-file eval.json]
The version is taken from --version, else from the dataset's "version" field ("v2.0" or "2.0"
mean v2.0, anything else v1.1, as the official v1.1 script accepts any version with a warning).
"""

import argparse
import collections
import json
import re
import string
import sys
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from absl import logging

from bert_tf import io

# Where run_squad writes the official scores of its predictions (and auto's threshold).
EVAL_RESULTS_FILE = "eval_results.json"

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
V1 = "1.1"
V2 = "2.0"

# === Normalization and per-answer scores ===


def normalize_answer(s: str) -> str:
  """Lowercase, remove punctuation, replace the articles a/an/the by spaces, collapse spaces."""
  s = s.lower()
  s = "".join(ch for ch in s if ch not in _PUNCTUATION)
  s = _ARTICLES.sub(" ", s)
  return " ".join(s.split())


def get_tokens(s: str) -> List[str]:
  """The normalized whitespace tokens of s ([] for "")."""
  if not s:
    return []
  return normalize_answer(s).split()


def _f1_of_tokens(pred_tokens: List[str], gold_tokens: List[str]):
  """F1 of two non-empty token lists (0 when nothing is shared), in the official arithmetic."""
  common = collections.Counter(pred_tokens) & collections.Counter(gold_tokens)
  num_same = sum(common.values())
  if num_same == 0:
    return 0
  precision = 1.0 * num_same / len(pred_tokens)
  recall = 1.0 * num_same / len(gold_tokens)
  return (2 * precision * recall) / (precision + recall)


def exact_match_score_v1(prediction: str, ground_truth: str) -> bool:
  """v1.1 EM: whether the normalized strings are equal."""
  return normalize_answer(prediction) == normalize_answer(ground_truth)


def f1_score_v1(prediction: str, ground_truth: str) -> float:
  """v1.1 F1 of the normalized tokens; 0 when none is shared, also when both are empty."""
  pred_tokens = normalize_answer(prediction).split()
  gold_tokens = normalize_answer(ground_truth).split()
  if not pred_tokens or not gold_tokens:
    return 0  # nothing can be shared (the official script reaches num_same == 0)
  return _f1_of_tokens(pred_tokens, gold_tokens)


def compute_exact_v2(a_gold: str, a_pred: str) -> int:
  """v2.0 EM (note the argument order of the official script: gold first): 1 or 0."""
  return int(normalize_answer(a_gold) == normalize_answer(a_pred))


def compute_f1_v2(a_gold: str, a_pred: str) -> float:
  """v2.0 F1 (gold first): if either side has no tokens, 1 when both have none, else 0."""
  gold_tokens = get_tokens(a_gold)
  pred_tokens = get_tokens(a_pred)
  if not gold_tokens or not pred_tokens:
    return int(gold_tokens == pred_tokens)
  return _f1_of_tokens(pred_tokens, gold_tokens)


# === Input checks ===


def _check_dataset(dataset: Any, source: str = "dataset") -> None:
  """ValueError naming `source` and the key when `dataset` (the "data" list) is malformed."""
  if not isinstance(dataset, list):
    raise ValueError(f"{source}: \"data\" must be a list of articles, got "
                     f"{type(dataset).__name__}")
  for i, article in enumerate(dataset):
    where = f"data[{i}]"
    if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
      raise ValueError(f"{source}: {where} has no \"paragraphs\" list")
    for j, paragraph in enumerate(article["paragraphs"]):
      where = f"data[{i}].paragraphs[{j}]"
      if not isinstance(paragraph, dict) or not isinstance(paragraph.get("qas"), list):
        raise ValueError(f"{source}: {where} has no \"qas\" list")
      for k, qa in enumerate(paragraph["qas"]):
        where = f"data[{i}].paragraphs[{j}].qas[{k}]"
        if not isinstance(qa, dict) or "id" not in qa:
          raise ValueError(f"{source}: {where} has no \"id\"")
        if not isinstance(qa["id"], str):
          raise ValueError(f"{source}: {where} \"id\" must be a string, got {qa['id']!r}")
        answers = qa.get("answers")
        if not isinstance(answers, list):
          raise ValueError(f"{source}: {where} (id {qa['id']}) has no \"answers\" list")
        for a, answer in enumerate(answers):
          if not isinstance(answer, dict) or not isinstance(answer.get("text"), str):
            raise ValueError(f"{source}: {where} (id {qa['id']}) answers[{a}] has no "
                             f"\"text\" string")


def _check_predictions(predictions: Any, source: str = "predictions") -> None:
  if not isinstance(predictions, dict):
    raise ValueError(f"{source}: predictions must be a JSON object {{question id: answer "
                     f"text}}, got {type(predictions).__name__}")
  for qid, text in predictions.items():
    if not isinstance(qid, str) or not isinstance(text, str):
      raise ValueError(f"{source}: predictions must map question ids to strings; "
                       f"{qid!r} maps to {type(text).__name__}")


def _check_na_probs(na_probs: Any, source: str = "na_probs") -> None:
  if not isinstance(na_probs, dict):
    raise ValueError(f"{source}: na_probs must be a JSON object {{question id: number}}, got "
                     f"{type(na_probs).__name__}")
  for qid, value in na_probs.items():
    if not isinstance(qid, str) or isinstance(value, bool) or \
        not isinstance(value, (int, float)):
      raise ValueError(f"{source}: na_probs must map question ids to numbers; "
                       f"{qid!r} maps to {value!r}")


def _questions(dataset):
  for article in dataset:
    for paragraph in article["paragraphs"]:
      yield from paragraph["qas"]


# === v1.1 ===


def evaluate_v1(dataset: List[Mapping[str, Any]],
                predictions: Mapping[str, str]) -> Dict[str, float]:
  """evaluate-v1.1.py's evaluate: {"exact_match": ..., "f1": ...} in percent.

  Args:
    dataset: the articles (the list under the dataset JSON's "data" key).
    predictions: {question id: predicted answer text}.

  Every question of the dataset counts; one without a prediction scores 0 (and is logged).
  """
  _check_dataset(dataset)
  _check_predictions(predictions)
  f1 = exact_match = total = 0
  for qa in _questions(dataset):
    total += 1
    if qa["id"] not in predictions:
      logging.warning("Unanswered question %s will receive score 0.", qa["id"])
      continue
    ground_truths = [answer["text"] for answer in qa["answers"]]
    if not ground_truths:
      raise ValueError(f"question {qa['id']} has no gold answers; SQuAD v1.1 needs at least "
                       f"one (evaluate unanswerable questions as version 2.0)")
    prediction = predictions[qa["id"]]
    exact_match += max(exact_match_score_v1(prediction, gt) for gt in ground_truths)
    f1 += max(f1_score_v1(prediction, gt) for gt in ground_truths)
  if not total:
    return {"exact_match": 0.0, "f1": 0.0}
  return {"exact_match": 100.0 * exact_match / total, "f1": 100.0 * f1 / total}


# === v2.0 ===


def make_qid_to_has_ans(dataset: List[Mapping[str, Any]]) -> Dict[str, bool]:
  """{question id: whether its raw "answers" list is non-empty}, in dataset order."""
  return {qa["id"]: bool(qa["answers"]) for qa in _questions(dataset)}


def get_raw_scores(dataset: List[Mapping[str, Any]], predictions: Mapping[str, str]
                   ) -> Tuple[Dict[str, int], Dict[str, float]]:
  """({qid: EM}, {qid: F1}) of the predicted questions, before any no-answer threshold."""
  exact_scores, f1_scores = {}, {}
  for qa in _questions(dataset):
    qid = qa["id"]
    gold_answers = [a["text"] for a in qa["answers"] if normalize_answer(a["text"])]
    if not gold_answers:
      gold_answers = [""]  # unanswerable: the only right answer is no answer
    if qid not in predictions:
      logging.warning("Missing prediction for %s", qid)
      continue
    prediction = predictions[qid]
    exact_scores[qid] = max(compute_exact_v2(a, prediction) for a in gold_answers)
    f1_scores[qid] = max(compute_f1_v2(a, prediction) for a in gold_answers)
  return exact_scores, f1_scores


def apply_no_ans_threshold(scores: Mapping[str, float], na_probs: Mapping[str, float],
                           qid_to_has_ans: Mapping[str, bool],
                           na_prob_thresh: float) -> Dict[str, float]:
  """Scores with every question whose na_prob > na_prob_thresh scored as a no-answer."""
  new_scores = {}
  for qid, score in scores.items():
    if qid not in na_probs:
      raise ValueError(f"na_probs has no value for question {qid}")
    if na_probs[qid] > na_prob_thresh:
      new_scores[qid] = float(not qid_to_has_ans[qid])
    else:
      new_scores[qid] = score
  return new_scores


def _eval_dict(exact_scores, f1_scores, qid_list=None):
  """OrderedDict(exact, f1, total) over qid_list (all scored questions when None)."""
  if qid_list is None:
    exact, f1 = exact_scores.values(), f1_scores.values()
  else:
    exact = [exact_scores[k] for k in qid_list]
    f1 = [f1_scores[k] for k in qid_list]
  total = len(exact)
  if not total:
    return collections.OrderedDict([("exact", 0.0), ("f1", 0.0), ("total", 0)])
  return collections.OrderedDict([("exact", 100.0 * sum(exact) / total),
                                  ("f1", 100.0 * sum(f1) / total),
                                  ("total", total)])


def find_best_thresh(preds: Mapping[str, str], scores: Mapping[str, float],
                     na_probs: Mapping[str, float],
                     qid_to_has_ans: Mapping[str, bool]) -> Tuple[float, float]:
  """The best score over all no-answer thresholds, and the threshold reaching it.

  Starts from "answer nothing": the score is the number of unanswerable questions of the
  dataset, threshold 0.0. Then lowers the threshold past one question at a time, in ascending
  na_prob order (the keys of na_probs, stable-sorted; keys without a score are skipped): an
  answerable question adds its raw score, an unanswerable one subtracts 1 if its prediction is
  a non-empty string (the raw text, not normalized). The threshold is the na_prob at which the
  running score first reaches its maximum.

  Args:
    preds: {qid: predicted text}.
    scores: the raw {qid: EM or F1} of the predicted questions (get_raw_scores).
    na_probs: {qid: na_prob}.
    qid_to_has_ans: {qid: answerable?} over the whole dataset.

  Returns:
    (100 * best score / number of scored questions, threshold).
  """
  num_no_ans = sum(1 for k in qid_to_has_ans if not qid_to_has_ans[k])
  cur_score = best_score = num_no_ans
  best_thresh = 0.0
  for qid in sorted(na_probs, key=lambda k: na_probs[k]):
    if qid not in scores:
      continue
    if qid_to_has_ans[qid]:
      diff = scores[qid]
    else:
      diff = -1 if preds[qid] else 0
    cur_score += diff
    if cur_score > best_score:
      best_score = cur_score
      best_thresh = na_probs[qid]
  if not scores:
    return 0.0, best_thresh
  return 100.0 * best_score / len(scores), best_thresh


def evaluate_v2(dataset: List[Mapping[str, Any]], predictions: Mapping[str, str],
                na_probs: Optional[Mapping[str, float]] = None,
                na_prob_thresh: float = 1.0) -> "collections.OrderedDict[str, float]":
  """evaluate-v2.0.py's main without the plots, as an OrderedDict in its key order.

  Args:
    dataset: the articles (the list under the dataset JSON's "data" key).
    predictions: {question id: predicted text}; "" predicts no answer.
    na_probs: {question id: no-answer score} (BERT's null_odds.json: logit differences), or
      None for the official default of 0.0 for every prediction (and no best_* keys).
    na_prob_thresh: questions with na_prob > na_prob_thresh are scored as no-answer.

  Returns:
    exact, f1, total; HasAns_exact, HasAns_f1, HasAns_total (if any question is answerable);
    NoAns_* likewise (if any is unanswerable); and with na_probs best_exact, best_exact_thresh,
    best_f1, best_f1_thresh. Questions without a prediction are skipped (and logged).
  """
  _check_dataset(dataset)
  _check_predictions(predictions)
  has_na_probs = na_probs is not None
  if has_na_probs:
    _check_na_probs(na_probs)
  else:
    na_probs = {k: 0.0 for k in predictions}
  qid_to_has_ans = make_qid_to_has_ans(dataset)
  has_ans_qids = [k for k, v in qid_to_has_ans.items() if v]
  no_ans_qids = [k for k, v in qid_to_has_ans.items() if not v]
  exact_raw, f1_raw = get_raw_scores(dataset, predictions)
  exact_thresh = apply_no_ans_threshold(exact_raw, na_probs, qid_to_has_ans, na_prob_thresh)
  f1_thresh = apply_no_ans_threshold(f1_raw, na_probs, qid_to_has_ans, na_prob_thresh)
  result = _eval_dict(exact_thresh, f1_thresh)
  for prefix, qids in (("HasAns", has_ans_qids), ("NoAns", no_ans_qids)):
    # The official script requires every question to have a prediction here (KeyError
    # otherwise); with all predicted, the filter changes nothing.
    scored = [k for k in qids if k in exact_thresh]
    if scored:
      for key, value in _eval_dict(exact_thresh, f1_thresh, scored).items():
        result[f"{prefix}_{key}"] = value
  if has_na_probs:
    best_exact, exact_thresh_value = find_best_thresh(predictions, exact_raw, na_probs,
                                                      qid_to_has_ans)
    best_f1, f1_thresh_value = find_best_thresh(predictions, f1_raw, na_probs, qid_to_has_ans)
    result["best_exact"] = best_exact
    result["best_exact_thresh"] = exact_thresh_value
    result["best_f1"] = best_f1
    result["best_f1_thresh"] = f1_thresh_value
  return result


# === Files and the command line ===


def _read_json(path: str) -> Any:
  text = io.read_text(path)
  try:
    return json.loads(text)
  except ValueError as e:
    raise ValueError(f"{path}: not valid JSON: {e}") from None


def _resolve_version(version: Optional[str], dataset_json: Mapping[str, Any]) -> str:
  if version is not None:
    name = str(version).lstrip("v")
    if name not in (V1, V2):
      raise ValueError(f"unknown SQuAD version {version!r}; expected \"1.1\" or \"2.0\"")
    return name
  return V2 if str(dataset_json.get("version")) in ("v2.0", "2.0") else V1


def evaluate_file(dataset_file: str, prediction_file: str, na_prob_file: Optional[str] = None,
                  version: Optional[str] = None, na_prob_thresh: float = 1.0) -> Dict[str, Any]:
  """Evaluates prediction_file (BERT's predictions.json) against a SQuAD dataset file.

  Files are read with bert_tf.io (local paths, gs:// and every tf.io.gfile scheme).

  Args:
    dataset_file: the SQuAD JSON ({"version": ..., "data": [articles]}).
    prediction_file: JSON {question id: answer text}.
    na_prob_file: JSON {question id: no-answer score} (BERT's null_odds.json); v2.0 only.
    version: "1.1" or "2.0"; None takes it from the dataset's "version" field ("v2.0" or "2.0"
      mean 2.0, anything else 1.1).
    na_prob_thresh: the v2.0 no-answer threshold.

  Returns:
    evaluate_v1's or evaluate_v2's result.

  Raises:
    ValueError: malformed JSON, no "data" key, a question without "id", predictions or
      na-probs that are not objects of strings / numbers (the message names file and key),
      or an na_prob_file with version 1.1.
  """
  return _evaluate_file(dataset_file, prediction_file, na_prob_file, version, na_prob_thresh)[1]


def _evaluate_file(dataset_file, prediction_file, na_prob_file, version, na_prob_thresh):
  """(version used, result) of evaluate_file."""
  dataset_json = _read_json(dataset_file)
  if not isinstance(dataset_json, dict) or "data" not in dataset_json:
    raise ValueError(f"{dataset_file}: no \"data\" key (expected a SQuAD dataset "
                     f"{{\"version\": ..., \"data\": [...]}})")
  dataset = dataset_json["data"]
  _check_dataset(dataset, dataset_file)
  predictions = _read_json(prediction_file)
  _check_predictions(predictions, prediction_file)
  version = _resolve_version(version, dataset_json)
  if version == V1:
    if na_prob_file:
      raise ValueError(f"{na_prob_file}: na-prob files are for SQuAD 2.0; the dataset is "
                       f"evaluated as version 1.1")
    if dataset_json.get("version") != V1:
      logging.warning("Evaluation expects v-1.1, but got dataset with v-%s",
                      dataset_json.get("version"))
    return version, evaluate_v1(dataset, predictions)
  na_probs = None
  if na_prob_file:
    na_probs = _read_json(na_prob_file)
    _check_na_probs(na_probs, na_prob_file)
  return version, evaluate_v2(dataset, predictions, na_probs=na_probs,
                              na_prob_thresh=na_prob_thresh)


def result_json(result: Mapping[str, Any], version: str) -> str:
  """The result as the official scripts print it (v2.0 with indent 2)."""
  return json.dumps(result) if version == V1 else json.dumps(result, indent=2)


def main(argv: Optional[Sequence[str]] = None) -> int:
  """The command line; prints the result as JSON. Returns the exit status."""
  parser = argparse.ArgumentParser(
      prog="python -m bert_tf.tasks.squad.metrics",
      description="The official SQuAD v1.1 / v2.0 evaluation of a predictions file.")
  parser.add_argument("data_file", help="the SQuAD dataset JSON")
  parser.add_argument("pred_file", help="predictions JSON {question id: answer text}")
  parser.add_argument("--na-prob-file", "--na_prob_file", default=None,
                      help="v2.0: JSON {question id: no-answer score} (BERT's null_odds.json)")
  parser.add_argument("--na-prob-thresh", "--na_prob_thresh", type=float, default=1.0,
                      help="v2.0: score a question as no-answer when its na_prob is above this")
  parser.add_argument("--version", choices=(V1, V2), default=None,
                      help="default: the dataset's \"version\" (v2.0 / 2.0 -> 2.0, else 1.1)")
  parser.add_argument("--out-file", "--out_file", default=None,
                      help="also write the result JSON here (atomically)")
  args = parser.parse_args(argv)
  try:
    version, result = _evaluate_file(args.data_file, args.pred_file, args.na_prob_file,
                                     args.version, args.na_prob_thresh)
    if args.out_file:
      io.write_text(args.out_file, json.dumps(result))
  except (ValueError, OSError) as e:
    print(f"{parser.prog}: error: {e}", file=sys.stderr)
    return 1
  print(result_json(result, version))
  return 0


if __name__ == "__main__":
  sys.exit(main())
