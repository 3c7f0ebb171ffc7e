"""The answers half of the original run_squad.py: the model's logits back to answer texts and
the prediction files.

The entry points keep the original's names and arguments:

* `RawResult(unique_id, start_logits, end_logits)` and `write_predictions(all_examples,
  all_features, all_results, n_best_size, max_answer_length, do_lower_case,
  output_prediction_file, output_nbest_file, output_null_log_odds_file,
  version_2_with_negative=False, null_score_diff_threshold=0.0)`: the original read the last
  two (and verbose_logging) from its FLAGS; here they are keyword arguments. The examples and
  features are squad_data's.
* `postprocess(...)`: the same three dicts without writing them; `predictions_from_nbest`:
  SQuAD 2.0 answers at another threshold; `dumps_indent4`: json.dumps(obj, indent=4), faster.

For the same logits, predictions.json / nbest_predictions.json / null_odds.json are the
original's, float for float. The internals are faster (benchmarks/squad.py measures them
against the original's loops on the same input): the n-best positions and valid spans of all
windows come from a few numpy operations over their stacked logits, and every question's
candidates from one stable lexsort; a convert_examples_to_features window's spans are read from
its paragraph's lists (squad_data._Window.doc_part); get_final_text's BasicTokenizer runs once
per distinct word; nbest_predictions.json is formatted one n-best list at a time; and the cyclic
garbage collector is paused while these acyclic objects are built (record_schema.collector_paused).

Where the original crashes, this module does not (google-research/bert#476, PR #1106): SQuAD
2.0, no non-null candidate in the n-best (every candidate was the null answer, or the example
produced no window at all: an empty context or one the tokenizer empties): the answer is "" and
null_odds.json gets NO_ANSWER_SCORE_DIFF (1e6, the original's own "no score yet" value; no
threshold turns it into an answer). The original raises AttributeError or IndexError there.
"""

import bisect
import collections
import functools
import itertools
import json
import math
import operator
from typing import (Any, Callable, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence,
                    Tuple)

from absl import logging
import numpy as np

from bert_tf import io
from bert_tf import record_schema
from bert_tf import tokenization
from bert_tf.tasks.squad import data as squad_data

# null_odds.json's value for a SQuAD 2.0 question without any non-null answer candidate.
NO_ANSWER_SCORE_DIFF = 1000000.0


# === Answer candidates and their text ===


class RawResult(NamedTuple):
  """The model's logits for one feature (lists or arrays of S floats)."""
  unique_id: int
  start_logits: Sequence[float]
  end_logits: Sequence[float]


def _get_best_indexes(logits, n_best_size: int) -> List[int]:
  """The n_best_size highest positions, highest first; ties in position order (the original's
  stable sort)."""
  values = np.asarray(logits, np.float64)
  return np.argsort(-values, kind="stable")[:max(n_best_size, 0)].tolist()


def _compute_softmax(scores: Sequence[float]) -> List[float]:
  """The original's pure-Python softmax (math.exp, max subtracted), float for float."""
  if not scores:
    return []
  max_score = None
  for score in scores:
    if max_score is None or score > max_score:
      max_score = score
  exp_scores = []
  total_sum = 0.0
  for score in scores:
    x = math.exp(score - max_score)
    exp_scores.append(x)
    total_sum += x
  return [score / total_sum for score in exp_scores]


def get_final_text(pred_text: str, orig_text: str, do_lower_case: bool,
                   verbose_logging: bool = False) -> str:
  """Projects the normalised prediction back onto the original words (the original's rules).

  pred_text is the detokenised WordPiece span ("steve smith"), orig_text the original words of
  that span joined with single spaces ("Steve Smith's"). The words are run through the
  BasicTokenizer; where pred_text occurs in the result, its characters are mapped back,
  ignoring spaces, to orig_text ("Steve Smith"). When that cannot be done exactly (pred_text
  not found, e.g. an [UNK]; normalisation changed the number of non-space characters, e.g.
  stripped accents or dropped control characters), orig_text is returned whole.
  """
  tok_text = " ".join(_basic_tokenizer(do_lower_case).tokenize(orig_text))
  return _final_text(pred_text, orig_text, tok_text, verbose_logging)


def _final_text(pred_text: str, orig_text: str, tok_text: str, verbose_logging: bool,
                word_starts: Optional[Tuple[Sequence[int], int]] = None) -> str:
  """get_final_text given tok_text, the BasicTokenizer words of orig_text joined by spaces.

  word_starts: when orig_text is words joined by single spaces (none empty, none holding a
  space), (starts, first): starts[j] counts the non-space characters before word j of a list
  of words, orig_text's words are those from word `first` on. It locates orig_text's non-space
  characters directly.
  """
  start_position = tok_text.find(pred_text)
  if start_position == -1:
    if verbose_logging:
      logging.info("Unable to find text: '%s' in '%s'", pred_text, orig_text)
    return orig_text
  end_position = start_position + len(pred_text) - 1

  # The original maps every non-space character of both strings to its index; only the two
  # ends are needed, and str.count / the runs of non-spaces find them in C.
  if len(orig_text) - orig_text.count(" ") != len(tok_text) - tok_text.count(" "):
    if verbose_logging:
      logging.info("Length not equal after stripping spaces: '%s' vs '%s'",
                   orig_text.replace(" ", ""), tok_text.replace(" ", ""))
    return orig_text
  # A position maps back only if it is not a space (start and end of a non-empty stripped
  # pred_text never are; an empty one has end_position -1, which never maps).
  if start_position >= len(tok_text) or tok_text[start_position] == " ":
    if verbose_logging:
      logging.info("Couldn't map start position")
    return orig_text
  if end_position < 0 or tok_text[end_position] == " ":
    if verbose_logging:
      logging.info("Couldn't map end position")
    return orig_text
  ns_start = start_position - tok_text.count(" ", 0, start_position)
  ns_end = end_position - tok_text.count(" ", 0, end_position)
  if word_starts is not None:
    # The n-th non-space character is in the k-th word of orig_text, after k separating spaces:
    # k + first is the last word starting at or before it.
    starts, first = word_starts
    offset = starts[first]
    return orig_text[ns_start + bisect.bisect_right(starts, ns_start + offset) - 1 - first:
                     ns_end + bisect.bisect_right(starts, ns_end + offset) - first]
  spaces = []
  at = orig_text.find(" ")
  while at >= 0:
    spaces.append(at)
    at = orig_text.find(" ", at + 1)
  return orig_text[_nth_non_space(spaces, ns_start):(_nth_non_space(spaces, ns_end) + 1)]


def _nth_non_space(spaces: List[int], n: int) -> int:
  """The index of the n-th (0-based) non-space character of a string whose spaces are at the
  sorted indexes `spaces`: the fixed point of index = n + (spaces before index)."""
  index = n
  while True:
    moved = n + bisect.bisect_right(spaces, index)
    if moved == index:
      return index
    index = moved


_BASIC_TOKENIZERS: Dict[bool, tokenization.BasicTokenizer] = {}


def _basic_tokenizer(do_lower_case: bool) -> tokenization.BasicTokenizer:
  key = bool(do_lower_case)
  if key not in _BASIC_TOKENIZERS:
    _BASIC_TOKENIZERS[key] = tokenization.BasicTokenizer(do_lower_case=key)
  return _BASIC_TOKENIZERS[key]


def detokenize(tokens: Sequence[str]) -> str:
  """WordPieces -> text as the original: join with spaces, drop " ##" and "##", collapse
  whitespace."""
  tok_text = " ".join(tokens).replace(" ##", "").replace("##", "")
  # Collapsing changes nothing when the only whitespace is single inner spaces: every other
  # character str.split() splits on is unprintable (categories Cc, Zs, Zl, Zp).
  if tok_text.isprintable() and "  " not in tok_text and not tok_text.startswith(" ") and \
      not tok_text.endswith(" "):
    return tok_text
  return " ".join(tok_text.strip().split())


def _feature_candidates(feature: squad_data.InputFeatures, result: RawResult, n_best_size: int,
                        max_answer_length: int):
  """The valid (start, end) pairs among the top starts x top ends, in the original's order
  (start rank, then end rank): (starts, ends, start logits, end logits) arrays."""
  start_logits = np.asarray(result.start_logits, np.float64)
  end_logits = np.asarray(result.end_logits, np.float64)
  start_indexes = np.asarray(_get_best_indexes(start_logits, n_best_size), np.int64)
  end_indexes = np.asarray(_get_best_indexes(end_logits, n_best_size), np.int64)
  size = max(len(start_logits), len(end_logits), len(feature.tokens))
  in_document = np.zeros(size, bool)
  max_context = np.zeros(size, bool)
  positions = feature.token_to_orig_map
  flags = feature.token_is_max_context
  first = next(iter(positions), 0)
  last = first + len(positions) - 1
  run = list(range(first, last + 1))
  if positions and 0 <= first and last < size and list(positions) == run and list(flags) == run:
    # convert_examples_to_features' windows: one contiguous run of positions, in order.
    in_document[first:last + 1] = True
    max_context[first:last + 1] = np.fromiter(flags.values(), bool, len(flags))
  else:
    in_document[[p for p in positions if 0 <= p < size]] = True
    max_context[[p for p, v in flags.items() if v and 0 <= p < size]] = True
  num_tokens = len(feature.tokens)
  good_start = (start_indexes < num_tokens) & in_document[start_indexes] & \
      max_context[start_indexes]
  good_end = (end_indexes < num_tokens) & in_document[end_indexes]
  length = end_indexes[None, :] - start_indexes[:, None] + 1
  valid = good_start[:, None] & good_end[None, :] & (length >= 1) & \
      (length <= max_answer_length)
  rows, cols = np.nonzero(valid)  # row-major: the original's nested loop order
  starts, ends = start_indexes[rows], end_indexes[cols]
  return starts, ends, start_logits[starts], end_logits[ends]


class _Cache(dict):
  """key -> compute(key), computed on the first lookup."""

  def __init__(self, compute: Callable[[Any], Any]):
    super().__init__()
    self._compute = compute

  def __missing__(self, key):
    value = self[key] = self._compute(key)
    return value


class _AnswerContext:
  """A paragraph's words as get_final_text needs them for any span of words, computed once for
  all its questions' candidates: the words joined with single spaces (with each word's start in
  that text) and each word's BasicTokenizer words joined with spaces (likewise one text, when
  the tokenizer empties no word)."""

  def __init__(self, doc_tokens: List[str], basic_words: _Cache):
    self.doc_tokens = doc_tokens
    self.text = " ".join(doc_tokens)
    # starts[k]: where word k starts in self.text (and len(self.text) + 1 past the last word).
    self.starts = list(itertools.accumulate(map((1).__add__, map(len, doc_tokens)), initial=0))
    # The BasicTokenizer never looks across whitespace: the words of a span's text are the
    # words of each of its words in turn. Words it empties (control characters) drop out.
    self.basic_words = basic_words
    self.basic = list(map(basic_words.__getitem__, doc_tokens))
    # nonspace_starts[k]: the non-space characters of self.text before word k.
    self.nonspace_starts = list(map(operator.sub, self.starts, range(len(self.starts))))
    self.basic_text = self.basic_starts = None
    if all(self.basic):
      self.basic_text = " ".join(self.basic)
      self.basic_starts = list(itertools.accumulate(map((1).__add__, map(len, self.basic)),
                                                    initial=0))

  def final_text(self, tok_text: str, first: int, last: int, verbose_logging: bool) -> str:
    """get_final_text(tok_text, " ".join(doc_tokens[first:last + 1]))."""
    if 0 <= first <= last < len(self.doc_tokens):
      orig_text = self.text[self.starts[first]:self.starts[last + 1] - 1]
      if self.basic_text is not None:
        basic_text = self.basic_text[self.basic_starts[first]:self.basic_starts[last + 1] - 1]
      else:
        basic_text = " ".join(filter(None, self.basic[first:last + 1]))
      words = last - first + 1
      word_starts = (self.nonspace_starts, first)
    else:  # not a span of a window of this paragraph: as the original slices
      orig_words = self.doc_tokens[first:last + 1]
      orig_text = " ".join(orig_words)
      basic_text = " ".join(filter(None, map(self.basic_words.__getitem__, orig_words)))
      words = len(orig_words)
      word_starts = (list(itertools.accumulate(map(len, orig_words), initial=0)), 0)
    # The whole words, unchanged by normalisation (as many non-space characters; SQuAD words
    # hold no " "): no mapping needed.
    if tok_text == basic_text and \
        len(basic_text) - basic_text.count(" ") == len(orig_text) - words + 1:
      return orig_text
    return _final_text(tok_text, orig_text, basic_text, verbose_logging, word_starts)


def _top_indexes(values: np.ndarray, n_best_size: int) -> np.ndarray:
  """_get_best_indexes of every row of a [windows, positions] array at once."""
  rows, size = values.shape
  n = max(min(n_best_size, size), 0)
  negated = -values
  if 0 < n < size and not np.isnan(negated).any():
    # A partial sort finds each row's n highest values; sorted by (value, position) they are
    # the stable sort's first n, unless a tie at the n-th value leaves the choice among the
    # tied positions to the partition (then the full sort below decides).
    top = np.argpartition(negated, n - 1, axis=1)[:, :n]
    top_values = np.take_along_axis(negated, top, axis=1)
    if ((negated <= top_values.max(axis=1, keepdims=True)).sum(axis=1) == n).all():
      return np.take_along_axis(top, np.lexsort((top, top_values), axis=1), axis=1)
  return np.argsort(negated, axis=1, kind="stable")[:, :n]


def _doc_parts(features: Sequence[squad_data.InputFeatures]) -> list:
  """Each feature's doc_part() (None for features of other types)."""
  return [f.doc_part() if isinstance(f, squad_data.InputFeatures) else None for f in features]


def _window_candidates(features: Sequence[squad_data.InputFeatures], results: Sequence[RawResult],
                       n_best_size: int, max_answer_length: int, parts: Sequence):
  """_feature_candidates of every window at once: (window indexes, starts, ends, start logits,
  end logits) arrays, window by window in order, each window's pairs in the original's order
  (start rank, then end rank). The windows' logits are stacked into one array when they all
  have the same length (they do when they come from one model): the n-best positions and the
  valid pairs are then a few array operations over all windows instead of a dozen per window.
  parts: _doc_parts(features)."""
  size = len(results[0].start_logits) if results else 0
  if not results or size == 0 or any(len(r.start_logits) != size or len(r.end_logits) != size
                                     for r in results):
    per_window = [(np.full(len(c[0]), w),) + c for w, c in enumerate(
        _feature_candidates(f, r, n_best_size, max_answer_length)
        for f, r in zip(features, results))]
    if not per_window:
      empty = np.zeros([0], np.int64)
      return empty, empty, empty, np.zeros([0]), np.zeros([0])
    return tuple(np.concatenate(a) for a in zip(*per_window))
  count = len(results)
  start_logits = np.fromiter(itertools.chain.from_iterable(r.start_logits for r in results),
                             np.float64, count * size).reshape(count, size)
  end_logits = np.fromiter(itertools.chain.from_iterable(r.end_logits for r in results),
                           np.float64, count * size).reshape(count, size)
  start_indexes = _top_indexes(start_logits, n_best_size)
  end_indexes = _top_indexes(end_logits, n_best_size)

  # The original's checks of a start or end position, for the n-best positions only: a dict
  # lookup for each (40 per window) instead of arrays over every position.
  good_start, good_end = [], []
  for feature, part, top_starts, top_ends in zip(features, parts, start_indexes.tolist(),
                                                 end_indexes.tolist()):
    if part is not None:
      # The window's context positions are one run [first, end), all below len(tokens).
      first, window_tokens, _, flags = part
      end = first + len(window_tokens)
      good_start += [first <= s < end and (flags is None or bool(flags[s - first]))
                     for s in top_starts]
      good_end += [first <= e < end for e in top_ends]
      continue
    to_orig, max_context, num_tokens = (feature.token_to_orig_map,
                                        feature.token_is_max_context, len(feature.tokens))
    good_start += [s < num_tokens and s in to_orig and bool(max_context.get(s, False))
                   for s in top_starts]
    good_end += [e < num_tokens and e in to_orig for e in top_ends]
  good_start = np.array(good_start, bool).reshape(start_indexes.shape)
  good_end = np.array(good_end, bool).reshape(end_indexes.shape)
  length = end_indexes[:, None, :] - start_indexes[:, :, None] + 1
  valid = good_start[:, :, None] & good_end[:, None, :] & (length >= 1) & \
      (length <= max_answer_length)
  windows, start_rank, end_rank = np.nonzero(valid)  # row-major: the original's loop order
  starts = start_indexes[windows, start_rank]
  ends = end_indexes[windows, end_rank]
  return windows, starts, ends, start_logits[windows, starts], end_logits[windows, ends]


def postprocess(all_examples: Sequence[squad_data.SquadExample],
                all_features: Sequence[squad_data.InputFeatures],
                all_results: Iterable[RawResult], n_best_size: int, max_answer_length: int,
                do_lower_case: bool, version_2_with_negative: bool = False,
                null_score_diff_threshold: float = 0.0, verbose_logging: bool = False):
  """(predictions, nbest, scores_diff) dicts keyed by qas_id: what write_predictions writes.

  scores_diff is empty unless version_2_with_negative. Raises KeyError naming a feature whose
  unique_id has no result.
  """
  with record_schema.collector_paused():
    return _postprocess(all_examples, all_features, all_results, n_best_size,
                        max_answer_length, do_lower_case, version_2_with_negative,
                        null_score_diff_threshold, verbose_logging)


def _postprocess(all_examples, all_features, all_results, n_best_size, max_answer_length,
                 do_lower_case, version_2_with_negative, null_score_diff_threshold,
                 verbose_logging):
  """postprocess's body: every example's windows (_example_windows), their candidates sorted
  as the original sorts them (_sorted_candidates), then each example's n-best (_nbest) and its
  prediction. Nine parameters: postprocess's, the original's write_predictions' own."""
  windows = _example_windows(all_examples, all_features, all_results, version_2_with_negative)
  candidates = _sorted_candidates(windows, len(all_examples), n_best_size, max_answer_length,
                                  version_2_with_negative)
  all_predictions = collections.OrderedDict()
  all_nbest_json = collections.OrderedDict()
  scores_diff_json = collections.OrderedDict()
  basic_tokenizer = _basic_tokenizer(do_lower_case)
  lower = basic_tokenizer.do_lower_case

  def basic_text(word):  # a plain ASCII word is its own only basic word
    if word.isalnum() and word.isascii():
      return word.lower() if lower else word
    return " ".join(basic_tokenizer.tokenize(word))
  basic_words = _Cache(basic_text)
  contexts = {}  # id(doc_tokens) -> _AnswerContext, shared by the questions of a paragraph
  for example_index, example in enumerate(all_examples):
    score_null, _, null_start_logit, null_end_logit = windows.nulls[example_index]
    context = contexts.get(id(example.doc_tokens))
    if context is None or context.doc_tokens is not example.doc_tokens:
      context = contexts[id(example.doc_tokens)] = _AnswerContext(example.doc_tokens,
                                                                  basic_words)
    nbest = _nbest(windows, candidates, example_index, context, n_best_size, verbose_logging)
    # The null answer is always among SQuAD 2.0's n-best.
    if version_2_with_negative and not any(text == "" for text, _, _ in nbest):
      nbest.append(("", null_start_logit, null_end_logit))
    # No valid span at all (SQuAD 1.1): the original's placeholder.
    if not nbest:
      nbest.append(("empty", 0.0, 0.0))

    probs = _compute_softmax([start + end for _, start, end in nbest])
    all_nbest_json[example.qas_id] = [
        {"text": text, "probability": probability, "start_logit": start, "end_logit": end}
        for (text, start, end), probability in zip(nbest, probs)]

    best_non_null_entry = next((entry for entry in nbest if entry[0]), None)
    if not version_2_with_negative:
      all_predictions[example.qas_id] = nbest[0][0]
    elif best_non_null_entry is None:
      # The original crashes here (google-research/bert#476): nothing but the null answer.
      scores_diff_json[example.qas_id] = NO_ANSWER_SCORE_DIFF
      all_predictions[example.qas_id] = ""
    else:
      text, start, end = best_non_null_entry
      score_diff = score_null - start - end
      scores_diff_json[example.qas_id] = score_diff
      all_predictions[example.qas_id] = "" if score_diff > null_score_diff_threshold else text
  return all_predictions, all_nbest_json, scores_diff_json


class _ExampleWindows(NamedTuple):
  """Every example's windows, in order, flattened: window w is windows[w] with results[w], of
  example window_example[w]; first_window[e] is example e's first window (one entry more at
  the end); nulls[e] is v2's null answer of example e, the window with the lowest [CLS] score:
  (null score, window, start logit, end logit)."""
  windows: List[squad_data.InputFeatures]
  results: List[RawResult]
  window_example: List[int]
  first_window: List[int]
  nulls: List[Tuple[float, int, float, float]]
  parts: list  # _doc_parts(windows)


def _example_windows(all_examples, all_features, all_results, version_2_with_negative
                     ) -> _ExampleWindows:
  """The windows of every example with their results (a KeyError names a window without)."""
  example_index_to_features = collections.defaultdict(list)
  for feature in all_features:
    example_index_to_features[feature.example_index].append(feature)
  unique_id_to_result = {result.unique_id: result for result in all_results}
  windows, results, window_example, first_window, nulls = [], [], [], [], []
  for example_index, example in enumerate(all_examples):
    first_window.append(len(windows))
    score_null = NO_ANSWER_SCORE_DIFF  # the original's "large and positive" start value
    null = (score_null, len(windows), 0.0, 0.0)
    for feature in example_index_to_features[example_index]:
      result = unique_id_to_result.get(feature.unique_id)
      if result is None:
        raise KeyError(f"no result for feature unique_id {feature.unique_id} (question "
                       f"{example.qas_id!r}, window {feature.doc_span_index})")
      if version_2_with_negative:
        start0, end0 = float(result.start_logits[0]), float(result.end_logits[0])
        if start0 + end0 < score_null:
          score_null = start0 + end0
          null = (score_null, len(windows), start0, end0)
      windows.append(feature)
      results.append(result)
      window_example.append(example_index)
    nulls.append(null)
  first_window.append(len(windows))
  return _ExampleWindows(windows, results, window_example, first_window, nulls,
                         _doc_parts(windows))


class _Candidates(NamedTuple):
  """Every example's candidate spans in the original's order: example e's are the entries
  bounds[e]:bounds[e + 1] of the lists (window index, start, end, start logit, end logit)."""
  bounds: List[int]
  window_ids: List[int]
  starts: List[int]
  ends: List[int]
  start_values: List[float]
  end_values: List[float]


def _sorted_candidates(w: _ExampleWindows, num_examples: int, n_best_size: int,
                       max_answer_length: int, version_2_with_negative: bool) -> _Candidates:
  """The valid spans of every window (_window_candidates), v2's null answers after them, each
  example's sorted by start + end logit, highest first, stable."""
  window_ids, starts, ends, start_values, end_values = _window_candidates(
      w.windows, w.results, n_best_size, max_answer_length, w.parts)
  candidate_example = np.asarray(w.window_example, np.int64)[window_ids]
  if version_2_with_negative:
    # The null answer joins the candidates of each example that has a window, after them.
    has_window = [e for e in range(num_examples) if w.first_window[e] < w.first_window[e + 1]]
    window_ids = np.concatenate([window_ids, [w.nulls[e][1] for e in has_window]]
                                ).astype(np.int64)
    starts = np.concatenate([starts, np.zeros(len(has_window), np.int64)])
    ends = np.concatenate([ends, np.zeros(len(has_window), np.int64)])
    start_values = np.concatenate([start_values, [w.nulls[e][2] for e in has_window]])
    end_values = np.concatenate([end_values, [w.nulls[e][3] for e in has_window]])
    candidate_example = np.concatenate([candidate_example, has_window]).astype(np.int64)
  # The original sorts each example's candidates by start + end logit, highest first, stable
  # (windows in order, then start rank, end rank, the null answer last): one lexsort by
  # (example, -score, position in that order) does every example's sort.
  order = np.lexsort((np.arange(len(starts)), -(start_values + end_values), candidate_example))
  bounds = np.searchsorted(candidate_example[order], np.arange(num_examples + 1)).tolist()
  return _Candidates(bounds, *(a[order].tolist() for a in (window_ids, starts, ends,
                                                            start_values, end_values)))


def _nbest(w: _ExampleWindows, candidates: _Candidates, example_index: int,
           context: "_AnswerContext", n_best_size: int, verbose_logging: bool) -> List[tuple]:
  """The original's n-best of one example before the null answer is added: up to n_best_size
  (text, start logit, end logit), de-duplicated by text, in candidate order."""
  c = candidates
  seen_predictions = set()
  nbest: List[tuple] = []
  for i in range(c.bounds[example_index], c.bounds[example_index + 1]):
    if len(nbest) >= n_best_size:
      break
    start_index, end_index = c.starts[i], c.ends[i]
    if start_index > 0:  # a non-null prediction
      part = w.parts[c.window_ids[i]]
      if part is not None:  # both ends are context positions of the window
        first, window_tokens, window_words, _ = part
        tok_text = detokenize(window_tokens[start_index - first:end_index - first + 1])
        first_word, last_word = window_words[start_index - first], \
            window_words[end_index - first]
      else:
        feature = w.windows[c.window_ids[i]]
        tok_text = detokenize(feature.tokens[start_index:(end_index + 1)])
        first_word, last_word = feature.token_to_orig_map[start_index], \
            feature.token_to_orig_map[end_index]
      final_text = context.final_text(tok_text, first_word, last_word, verbose_logging)
      if final_text in seen_predictions:
        continue
    else:
      final_text = ""
    seen_predictions.add(final_text)
    nbest.append((final_text, c.start_values[i], c.end_values[i]))
  return nbest


# === Prediction files ===


def write_predictions(all_examples, all_features, all_results, n_best_size, max_answer_length,
                      do_lower_case, output_prediction_file, output_nbest_file,
                      output_null_log_odds_file, version_2_with_negative=False,
                      null_score_diff_threshold=0.0, verbose_logging=False):
  """Writes predictions.json, nbest_predictions.json and (SQuAD 2.0) null_odds.json.

  Size: twelve parameters: the original run_squad.py's write_predictions, same names and
  order, so its callers port unchanged.

  The original's files for the same logits: each is json.dumps(obj, indent=4) plus a newline,
  keyed by qas_id in example order. predictions: the best answer text (v2: "" when the null
  score minus the best non-null score is above null_score_diff_threshold, so a negative
  threshold gives more "" answers); nbest: up to n_best_size {text, probability, start_logit,
  end_logit} per question, de-duplicated by text; null_odds: that score difference. Each file
  is written atomically.

  Returns:
    (predictions, nbest, scores_diff) as postprocess.
  """
  logging.info("Writing predictions to: %s", output_prediction_file)
  logging.info("Writing nbest to: %s", output_nbest_file)
  with record_schema.collector_paused():
    predictions, nbest, scores_diff = postprocess(
        all_examples, all_features, all_results, n_best_size, max_answer_length, do_lower_case,
        version_2_with_negative, null_score_diff_threshold, verbose_logging)
    io.write_text(output_prediction_file, dumps_indent4(predictions) + "\n")
    io.write_text(output_nbest_file, dumps_indent4(nbest) + "\n")
    if version_2_with_negative:
      io.write_text(output_null_log_odds_file, dumps_indent4(scores_diff) + "\n")
  return predictions, nbest, scores_diff


def _json_scalar(value) -> str:
  if type(value) is float and value - value == 0.0:  # pylint: disable=unidiomatic-typecheck
    return float.__repr__(value)  # finite: json writes float.__repr__
  if isinstance(value, str):
    return _encode_string(value)
  if value is True or value is False or value is None:
    return json.dumps(value)
  if isinstance(value, float):
    if value != value or value in (math.inf, -math.inf):
      return json.dumps(value)  # NaN, Infinity, -Infinity as json writes them
    return float.__repr__(value)
  if isinstance(value, int):
    return int.__repr__(value)
  raise TypeError(f"cannot write {type(value).__name__} as a JSON scalar")


_encode_string = json.encoder.encode_basestring_ascii


def dumps_indent4(obj, level: int = 0) -> str:
  """json.dumps(obj, indent=4), character for character, for the prediction files' dicts and
  lists of strings and numbers: CPython's json uses its pure-Python encoder whenever indent is
  given, which is a quarter of the post-processing time; this assembles the same text from
  the C string encoder and float repr."""
  if isinstance(obj, dict):
    if not obj:
      return "{}"
    inner = "\n" + "    " * (level + 1)
    items = [_encode_string(_json_key(key)) + ": " +
             (dumps_indent4(value, level + 1) if isinstance(value, (dict, list, tuple))
              else _json_scalar(value)) for key, value in obj.items()]
    return "{" + inner + ("," + inner).join(items) + "\n" + "    " * level + "}"
  if isinstance(obj, (list, tuple)):
    if not obj:
      return "[]"
    fast = _nbest_entries(obj, level)
    if fast is not None:
      return fast
    inner = "\n" + "    " * (level + 1)
    items = [dumps_indent4(value, level + 1) if isinstance(value, (dict, list, tuple))
             else _json_scalar(value) for value in obj]
    return "[" + inner + ("," + inner).join(items) + "\n" + "    " * level + "]"
  return _json_scalar(obj)


_NBEST_KEYS = ("text", "probability", "start_logit", "end_logit")


@functools.lru_cache(maxsize=None)
def _nbest_entry_format(level: int) -> str:
  """An n-best entry (a dict at `level`) as dumps_indent4 writes it, its four values left as
  %s (the encoded text) and %r (float.__repr__, what json writes for a finite float)."""
  inner, outer = "\n" + "    " * (level + 1), "\n" + "    " * level
  return "{" + inner + ("," + inner).join(
      f'"{key}": {"%s" if key == "text" else "%r"}' for key in _NBEST_KEYS) + outer + "}"


@functools.lru_cache(maxsize=256)
def _nbest_list_format(level: int, count: int) -> str:
  """A list of `count` n-best entries at `level` as dumps_indent4 writes it (%-format)."""
  inner = "\n" + "    " * (level + 1)
  return "[" + inner + ("," + inner).join([_nbest_entry_format(level + 1)] * count) + \
      "\n" + "    " * level + "]"


def _nbest_entries(entries, level: int) -> Optional[str]:
  """dumps_indent4 of a list of n-best entries at `level`, or None when the list is anything
  else: each entry a dict of exactly text (str), probability, start_logit and end_logit (finite
  floats) in that order. nbest_predictions.json is 40 000 of them for 2 000 questions; one
  format string per list is several times faster than encoding each value on its own."""
  values = []
  for entry in entries:
    if type(entry) is not dict or tuple(entry) != _NBEST_KEYS:  # pylint: disable=unidiomatic-typecheck
      return None
    values += entry.values()
  texts, numbers = values[0::4], values[1::4] + values[2::4] + values[3::4]
  if set(map(type, texts)) != {str} or set(map(type, numbers)) != {float}:
    return None
  # A sum minus itself is 0.0 exactly when every term is finite (and the sum does not overflow;
  # if it does, the general path writes the same text). NaN and infinities have json spellings.
  total = sum(numbers)
  if total - total != 0.0:
    return None
  values[0::4] = map(_encode_string, texts)
  return _nbest_list_format(level, len(entries)) % tuple(values)


def _json_key(key) -> str:
  """A dict key as json.dumps turns it into a string (ids may be numbers in a SQuAD file)."""
  if isinstance(key, str):
    return key
  if key is True or key is False or key is None:
    return json.dumps(key)
  if isinstance(key, (int, float)):
    return _json_scalar(key)
  raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def predictions_from_nbest(nbest: Mapping[str, Sequence[Mapping[str, Any]]],
                           scores_diff: Mapping[str, float], threshold: float
                           ) -> Dict[str, str]:
  """SQuAD 2.0 answers at another null_score_diff_threshold, from the n-best and null odds
  (what re-running with --null_score_diff_threshold gives, without the model)."""
  answers = collections.OrderedDict()
  for qas_id, entries in nbest.items():
    best = next((entry["text"] for entry in entries if entry["text"]), "")
    diff = scores_diff.get(qas_id, NO_ANSWER_SCORE_DIFF)
    answers[qas_id] = "" if diff > threshold else best
  return answers
