"""Raw-text question answering for TF Serving: the whole of run_squad's prediction in-graph.

`QuestionAnsweringModule` takes a question and a context per row and returns the answer that
`bert_tf.tasks.squad_answers.postprocess` (predictions.json) gives for the same model and inputs.
Every step of the original's prediction path is a TensorFlow or tensorflow-text op, so TF Serving
(or `tf.saved_model.load` with `import tensorflow_text`) runs it without Python:

  1. words: the context split on the reader's five separators (" \\t\\r\\n\\u202f"), with each
     word's code point offset (read_squad_examples' split_context);
  2. WordPieces of each word (InGraphTokenizer, the reference FullTokenizer's ids) and the word
     of every piece; the question's pieces cut to max_query_length;
  3. windows as doc_spans: max_tokens = seq_length - len(question) - 3 context pieces each, the
     next one min(max_tokens, doc_stride) pieces further, until one reaches the end;
  4. `[CLS] question [SEP] window [SEP]`, padded with id 0 to seq_length, through the model;
  5. max context as _check_is_max_context (min(left, right) + 0.01 * length in float64, the
     first window wins ties);
  6. candidates per window: the top n_best_size starts x top n_best_size ends (ties: lower
     position first, the original's stable sort), valid when both are in the window's context,
     the start has its max context there, end >= start and the span is at most
     max_answer_length long; the best is the highest start_logit + end_logit (float64), ties
     to the earlier (window, start rank, end rank), which is the first of the original's stable
     descending sort;
  7. SQuAD 2.0: score_null = the smallest start_logit[0] + end_logit[0] of the windows;
     null_score_diff = (score_null - start_logit) - end_logit of the best candidate (the
     original's expression), "" above the threshold; without any candidate "" and
     NO_ANSWER_SCORE_DIFF (SQuAD 1.1: the original's placeholder "empty");
  8. get_final_text: the detokenised pieces found in the BasicTokenizer words of the original
     words, mapped back onto the original words through their non-space characters, or the
     original words whole when that fails.

Outputs per row: answer (string), score (float64, start_logit + end_logit of the best non-null
span; 0.0 without one), start / end (int32 code point offsets into the context of the answer's
first character and one past its last; -1 / -1 when the answer is "" or "empty"); with SQuAD 2.0
also null_score_diff (float64, as null_odds.json) and has_answer (bool).

Contexts and questions are read as UTF-8 with invalid bytes dropped (the offsets count code
points of the context after that, i.e. of the context itself when it is valid UTF-8).
"""

import dataclasses
from typing import Any, Mapping, NamedTuple, Optional, Union

import keras
import numpy as np
import tensorflow as tf

from bert_tf.config import BertConfig
from bert_tf.model.encoder import ENCODER_INPUTS
from bert_tf.packing import Packer
from bert_tf.serving import tf_serving
from bert_tf.serving.modules import ReusableModule
from bert_tf.serving.modules import call_cut
from bert_tf.serving.modules import signature_function
from bert_tf.text import InGraphTokenizer

# The reader's word separators (squad_data.split_context): space, tab, CR, LF, U+202F.
SQUAD_SEPARATORS = (0x20, 0x09, 0x0D, 0x0A, 0x202F)
# squad_answers.NO_ANSWER_SCORE_DIFF (not imported: the serving package needs nothing of tasks).
NO_ANSWER_SCORE_DIFF = 1000000.0
# The original's SQuAD 1.1 answer when no span is valid.
EMPTY_ANSWER = "empty"
# Warm-up requests: a short pair and a context long enough for several windows.
WARMUP_QUESTIONS = ("Where did the man go?", "What did he buy?")
WARMUP_CONTEXTS = ("The man went to the store.",
                   "He bought a gallon of milk, " * 30 + "and then he went home.")

_STRINGS = tf.TensorSpec([None], tf.string)

# Shape legend: B = batch (questions), T = windows of the whole batch, S = seq_length,
# K = min(n_best_size, S), N = words / pieces of the whole batch.


def _valid_utf8(text: tf.Tensor) -> tf.Tensor:
  return tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="ignore",
                                      replace_control_characters=False)


def _padded(values: tf.Tensor, fill) -> tf.Tensor:
  """values with one more element (or row) at the end, so a clipped gather never fails."""
  pad = tf.fill(tf.concat([[1], tf.shape(values)[1:]], axis=0), tf.constant(fill, values.dtype))
  return tf.concat([values, pad], axis=0)


class QuestionAnsweringModule(ReusableModule):
  """A fine-tuned span model on raw text: the original run_squad prediction, in one graph.

  Signatures (B = batch):
    serving_default, answer: question [B] string, context [B] string ->
      answer [B] string, score [B] float64, start [B] int32, end [B] int32, and with
      version_2_with_negative also null_score_diff [B] float64, has_answer [B] bool.
  """

  _TF_MODULE_IGNORED_PROPERTIES = ReusableModule._TF_MODULE_IGNORED_PROPERTIES | {"_vocab"}

  def __init__(self, tokenizer: Union[InGraphTokenizer, Packer], model: keras.Model,
               seq_length: int, doc_stride: int, max_query_length: int, n_best_size: int,
               max_answer_length: int, do_lower_case: bool, version_2_with_negative: bool,
               null_score_diff_threshold: float):
    super().__init__(name="bert_squad")
    # With a Packer, windows run cut to its length buckets (modules.call_cut).
    self._width = tokenizer.width if isinstance(tokenizer, Packer) else None
    if isinstance(tokenizer, Packer):
      tokenizer = tokenizer.tokenizer
    for name, value in (("seq_length", seq_length), ("doc_stride", doc_stride),
                        ("max_query_length", max_query_length), ("n_best_size", n_best_size),
                        ("max_answer_length", max_answer_length)):
      if int(value) < 1:
        raise ValueError(f"{name} must be positive, got {value}")
    if seq_length <= max_query_length + 3:
      raise ValueError(f"seq_length ({seq_length}) must be greater than max_query_length "
                       f"({max_query_length}) + 3")
    if tokenizer.do_lower_case != bool(do_lower_case):
      raise ValueError(f"do_lower_case={do_lower_case} but the tokenizer has "
                       f"do_lower_case={tokenizer.do_lower_case}")
    for token, token_id in (("[CLS]", tokenizer.cls_id), ("[SEP]", tokenizer.sep_id)):
      if token_id is None:
        raise ValueError(f"the vocab has no {token} token, needed for the windows")
    self.tokenizer = tokenizer
    self.model = model
    self.seq_length = int(seq_length)
    self.doc_stride = int(doc_stride)
    self.max_query_length = int(max_query_length)
    self.n_best_size = int(n_best_size)
    self.max_answer_length = int(max_answer_length)
    self.do_lower_case = bool(do_lower_case)
    self.version_2_with_negative = bool(version_2_with_negative)
    self.null_score_diff_threshold = float(null_score_diff_threshold)
    self._cls_id = int(tokenizer.cls_id)
    self._sep_id = int(tokenizer.sep_id)
    self._vocab = self._no_dependency(list(tokenizer.vocab))  # untracked (text.py says why)
    self.answer = signature_function(self._answer, [_STRINGS, _STRINGS])
    self.serving_default = signature_function(self._answer, [_STRINGS, _STRINGS])
    self.signature_functions = {"serving_default": self.serving_default, "answer": self.answer}
    # TF Hub: __call__ on the encoder's three inputs (the bert_preprocessor's output) ->
    # the model's logits, with its variables, for fine-tuning through hub.KerasLayer.
    self.make_reusable_on_ids(model)

  # --- the steps ---

  def _words(self, context: tf.Tensor):
    """The reader's words of every context.

    Returns:
      words [N] string, word_row [N] int64 (the question of each word), word_start [N] int64
      (its code point offset in its context), word_length [N] int64 (code points).
    """
    chars = tf.strings.unicode_decode(context, "UTF-8")  # [B, (C)]
    cp = chars.flat_values
    total = tf.shape(cp, out_type=tf.int64)[0]
    is_sep = tf.zeros_like(cp, tf.bool)
    for separator in SQUAD_SEPARATORS:
      is_sep |= tf.equal(cp, separator)
    row_starts = chars.row_starts()
    row_limits = chars.row_limits()
    row = chars.value_rowids()
    index = tf.range(total, dtype=tf.int64)
    first = tf.equal(index, tf.gather(row_starts, row))
    last = tf.equal(index + 1, tf.gather(row_limits, row))
    prev_sep = tf.concat([[True], is_sep[:-1]], axis=0) | first
    next_sep = tf.concat([is_sep[1:], [True]], axis=0) | last
    word_first = tf.where(~is_sep & prev_sep)[:, 0]
    word_last = tf.where(~is_sep & next_sep)[:, 0]
    word_length = word_last - word_first + 1
    word_row = tf.gather(row, word_first)
    word_start = word_first - tf.gather(row_starts, word_row)
    word_chars = tf.RaggedTensor.from_row_lengths(tf.boolean_mask(cp, ~is_sep), word_length)
    words = tf.strings.unicode_encode(word_chars, "UTF-8")
    return words, word_row, word_start, word_length

  def _answer(self, question, context):
    """The answer of every (question, context) row: the module's steps 1-8, one method each."""
    question = _valid_utf8(question)
    context = _valid_utf8(context)
    windows = self._windows(question, context)  # 1-3
    grid, start_logits, end_logits = self._window_logits(windows)  # 4
    max_context = self._max_context(windows, grid)  # 5
    best = self._best_spans(windows, grid, max_context, start_logits, end_logits)  # 6
    has_answer = best.has_candidate
    if self.version_2_with_negative:
      has_answer, score_diff = self._null_answer(windows, best, start_logits, end_logits)  # 7
    text, start, end = self._answer_text(windows, best)  # 8
    result = dict(answer=tf.where(has_answer, text,
                                  "" if self.version_2_with_negative else EMPTY_ANSWER),
                  score=tf.where(best.has_candidate, best.score, 0.0),
                  start=tf.where(has_answer, start, -1), end=tf.where(has_answer, end, -1))
    if self.version_2_with_negative:
      result.update(null_score_diff=score_diff, has_answer=has_answer)
    return result

  def _windows(self, question, context) -> "_Windows":
    """Steps 1-3: words, their pieces and the word of each piece, the question's pieces, and
    the windows (doc_spans) of every row."""
    batch = tf.shape(context, out_type=tf.int64)[0]
    words, word_row, word_start, word_length = self._words(context)
    pieces = self.tokenizer.tokenize(words)  # [N words, (pieces)]
    doc_ids = tf.cast(pieces.flat_values, tf.int32)  # [N pieces]
    word_splits = tf.RaggedTensor.from_value_rowids(word_row, word_row, nrows=batch).row_splits
    doc_splits = tf.gather(pieces.row_splits, word_splits)  # [B + 1]
    doc_start = doc_splits[:-1]
    num_doc = doc_splits[1:] - doc_start  # [B]
    query = self.tokenizer.tokenize(question)  # [B, (q)]
    query_len = tf.minimum(query.row_lengths(), self.max_query_length)
    query_ids = tf.cast(query.to_tensor(default_value=0, shape=[None, self.max_query_length]),
                        tf.int32)
    max_tokens = self.seq_length - query_len - 3
    step = tf.minimum(max_tokens, self.doc_stride)
    extra = tf.maximum(num_doc - max_tokens, 0)
    num_windows = tf.where(num_doc > 0, 1 + (extra + step - 1) // step, 0)
    windows = tf.ragged.range(num_windows)  # [B, (W)]
    win_row = windows.value_rowids()  # [T]
    win_start = windows.flat_values * tf.gather(step, win_row)
    win_len = tf.minimum(tf.gather(num_doc, win_row) - win_start, tf.gather(max_tokens, win_row))
    return _Windows(
        batch=batch, words=words, word_start=word_start, word_length=word_length,
        doc_ids=doc_ids, piece_word=pieces.value_rowids(),  # global word index of each piece
        doc_start=doc_start, query_ids=query_ids, num_windows=num_windows, win_row=win_row,
        win_start=win_start, win_len=win_len,
        doc_offset=tf.gather(query_len, win_row) + 2)  # [T]

  def _window_logits(self, w: "_Windows"):
    """Step 4: [CLS] question [SEP] window [SEP], padded with 0, through the model.

    Returns:
      (the windows' _Grid, start_logits [T, S] float32, end_logits [T, S] float32).
    """
    S = self.seq_length  # pylint: disable=invalid-name
    p = tf.range(S, dtype=tf.int64)[tf.newaxis, :]  # [1, S]
    q_len = w.doc_offset[:, tf.newaxis] - 2
    off = w.doc_offset[:, tf.newaxis]
    length = w.win_len[:, tf.newaxis]
    in_doc = (p >= off) & (p < off + length)  # [T, S]
    q_ids = tf.gather(tf.gather(w.query_ids, w.win_row),
                      tf.clip_by_value(p - 1, 0, self.max_query_length - 1) +
                      tf.zeros_like(off), batch_dims=1)
    token_index = (tf.gather(w.doc_start, w.win_row) + w.win_start)[:, tf.newaxis] + p - off
    num_pieces = tf.shape(w.doc_ids, out_type=tf.int64)[0]
    d_ids = tf.gather(_padded(w.doc_ids, 0), tf.clip_by_value(token_index, 0, num_pieces))
    zeros = tf.zeros_like(d_ids)
    ids = tf.where(in_doc, d_ids, zeros)
    ids = tf.where(tf.equal(p, off + length) | tf.equal(p, q_len + 1), self._sep_id, ids)
    ids = tf.where((p >= 1) & (p <= q_len), q_ids, ids)
    ids = tf.where(tf.equal(p, 0), self._cls_id, ids)
    input_mask = tf.cast(p <= off + length, tf.int32)
    type_ids = tf.cast((p >= off) & (p <= off + length), tf.int32)
    outputs = call_cut(self.model, dict(zip(ENCODER_INPUTS, (ids, input_mask, type_ids))),
                       self._width, S, infer=self.infer)
    start_logits = tf.ensure_shape(tf.cast(outputs["start_logits"], tf.float32), [None, S])
    end_logits = tf.ensure_shape(tf.cast(outputs["end_logits"], tf.float32), [None, S])
    return _Grid(p, off, length, in_doc, token_index), start_logits, end_logits

  def _max_context(self, w: "_Windows", grid: "_Grid") -> tf.Tensor:
    """Step 5: [T, S] whether a position's piece has its max context in that window (the first
    window with the highest score for each piece)."""
    p, off, length, in_doc, token_index = grid
    num_pieces = tf.shape(w.doc_ids, out_type=tf.int64)[0]
    total_windows = tf.shape(w.win_row, out_type=tf.int64)[0]
    j = p - off
    context_score = (tf.cast(tf.minimum(j, length - 1 - j), tf.float64) +
                     0.01 * tf.cast(length, tf.float64))  # [T, S]
    segment = tf.where(in_doc, token_index, num_pieces)  # out of the document: a spare segment
    best_score = tf.math.unsorted_segment_max(tf.reshape(context_score, [-1]),
                                              tf.reshape(segment, [-1]), num_pieces + 1)
    window_id = tf.broadcast_to(tf.range(total_windows)[:, tf.newaxis], tf.shape(segment))
    reaches_best = in_doc & tf.equal(context_score, tf.gather(best_score, segment))
    first_best = tf.math.unsorted_segment_min(
        tf.reshape(tf.where(reaches_best, window_id, total_windows), [-1]),
        tf.reshape(segment, [-1]), num_pieces + 1)
    return in_doc & tf.equal(tf.gather(first_best, segment), window_id)  # [T, S]

  def _best_spans(self, w: "_Windows", grid: "_Grid", max_context, start_logits, end_logits
                  ) -> "_Best":
    """Step 6: the best valid span of every row among the top starts x top ends of each of
    its windows."""
    K = min(self.n_best_size, self.seq_length)  # pylint: disable=invalid-name
    batch, win_row = w.batch, w.win_row
    start_values, start_top = tf.math.top_k(start_logits, k=K)  # [T, K]
    end_values, end_top = tf.math.top_k(end_logits, k=K)
    start_top = tf.cast(start_top, tf.int64)
    end_top = tf.cast(end_top, tf.int64)
    start_ok = tf.gather(max_context, start_top, batch_dims=1)  # max context implies in_doc
    end_ok = tf.gather(grid.in_doc, end_top, batch_dims=1)
    s = start_top[:, :, tf.newaxis]
    e = end_top[:, tf.newaxis, :]
    valid = (start_ok[:, :, tf.newaxis] & end_ok[:, tf.newaxis, :] & (e >= s) &
             (e - s + 1 <= self.max_answer_length))  # [T, K, K]
    start64 = tf.cast(start_values, tf.float64)
    end64 = tf.cast(end_values, tf.float64)
    score = start64[:, :, tf.newaxis] + end64[:, tf.newaxis, :]
    flat_valid = tf.reshape(valid, [-1])
    flat_score = tf.reshape(score, [-1])
    candidate_row = tf.repeat(win_row, K * K)
    neg_inf = tf.constant(-np.inf, tf.float64)
    best = tf.math.unsorted_segment_max(tf.where(flat_valid, flat_score, neg_inf),
                                        candidate_row, batch)
    has_candidate = tf.math.unsorted_segment_max(tf.cast(flat_valid, tf.int32),
                                                 candidate_row, batch) > 0
    flat_index = tf.range(tf.shape(flat_valid, out_type=tf.int64)[0])
    num_candidates = tf.shape(flat_index, out_type=tf.int64)[0]
    is_best = flat_valid & tf.equal(flat_score, tf.gather(_padded(best, 0.0), candidate_row))
    best_index = tf.math.unsorted_segment_min(
        tf.where(is_best, flat_index, num_candidates), candidate_row, batch)
    best_index = tf.where(has_candidate, best_index, 0)
    best_window = best_index // (K * K)
    start_at = tf.stack([best_window, (best_index // K) % K], axis=1)
    end_at = tf.stack([best_window, best_index % K], axis=1)
    start_logit = tf.where(has_candidate, tf.gather_nd(_padded(start64, 0.0), start_at), 0.0)
    end_logit = tf.where(has_candidate, tf.gather_nd(_padded(end64, 0.0), end_at), 0.0)
    return _Best(has_candidate=has_candidate, best=best, window=best_window,
                 start=tf.gather_nd(_padded(start_top, 0), start_at),
                 end=tf.gather_nd(_padded(end_top, 0), end_at),
                 start_logit=start_logit, end_logit=end_logit, score=start_logit + end_logit)

  def _null_answer(self, w: "_Windows", best: "_Best", start_logits, end_logits):
    """Step 7 (SQuAD 2.0): (has_answer [B], null_score_diff [B] float64)."""
    answer_found = best.has_candidate
    null_scores = (tf.cast(start_logits[:, 0], tf.float64) +
                   tf.cast(end_logits[:, 0], tf.float64))
    min_null = tf.math.unsorted_segment_min(null_scores, w.win_row, w.batch)
    # postprocess starts from NO_ANSWER_SCORE_DIFF and keeps a window's null score only when
    # it is strictly lower; its null candidate then has that window's logits (else 0, 0).
    lower = min_null < NO_ANSWER_SCORE_DIFF
    score_null = tf.where(lower, min_null, NO_ANSWER_SCORE_DIFF)
    if self.n_best_size == 1:
      # A one-entry n-best holds the null answer alone when it sorts first (strictly higher:
      # it is appended last, and the sort is stable).
      null_candidate = tf.where(lower, min_null, 0.0)
      answer_found &= ~((w.num_windows > 0) & (null_candidate > best.best))
    score_diff = tf.where(answer_found,
                          (score_null - best.start_logit) - best.end_logit,
                          NO_ANSWER_SCORE_DIFF)
    return answer_found & ~(score_diff > self.null_score_diff_threshold), score_diff

  def _answer_text(self, w: "_Windows", best: "_Best"):
    """Step 8: get_final_text of every row's best span, and its code point offsets in the
    context: (text [B], start [B] int32, end [B] int32, one past the last character)."""
    has_candidate = best.has_candidate
    num_pieces = tf.shape(w.doc_ids, out_type=tf.int64)[0]
    num_words = tf.shape(w.words, out_type=tf.int64)[0]
    base = tf.gather(_padded(tf.gather(w.doc_start, w.win_row) + w.win_start - w.doc_offset, 0),
                     best.window)
    piece_first = tf.where(has_candidate, base + best.start, 0)  # global piece indexes
    piece_last = tf.where(has_candidate, base + best.end, -1)
    span_pieces = tf.gather(w.doc_ids, tf.ragged.range(piece_first, piece_last + 1))
    vocab = tf.constant(self._vocab, tf.string)
    pred_text = tf.strings.reduce_join(tf.gather(vocab, span_pieces), axis=1, separator=" ")
    pred_text = tf.strings.regex_replace(pred_text, " ##", "", replace_global=True)
    pred_text = tf.strings.regex_replace(pred_text, "##", "", replace_global=True)
    pred_text = tf.strings.regex_replace(pred_text, "^ +| +$", "", replace_global=True)
    pred_text = tf.strings.regex_replace(pred_text, " +", " ", replace_global=True)
    padded_piece_word = _padded(w.piece_word, 0)
    first_word = tf.where(has_candidate,
                          tf.gather(padded_piece_word, tf.minimum(piece_first, num_pieces)), 0)
    last_word = tf.where(has_candidate,
                         tf.gather(padded_piece_word, tf.clip_by_value(piece_last, 0, num_pieces)),
                         -1)
    orig_text = tf.strings.reduce_join(tf.gather(w.words, tf.ragged.range(first_word,
                                                                          last_word + 1)),
                                       axis=1, separator=" ")
    tok_text = tf.strings.reduce_join(self.tokenizer.split_words(orig_text), axis=1,
                                      separator=" ")
    first_char, last_char = tf.map_fn(
        _project, (pred_text, tok_text, orig_text),
        fn_output_signature=(tf.TensorSpec([], tf.int64), tf.TensorSpec([], tf.int64)))
    text = tf.strings.substr(orig_text, first_char, last_char - first_char + 1,
                             unit="UTF8_CHAR")

    # Offsets in the context: char c of the k-th word of orig_text is word_start + c.
    g = tf.math.cumsum(w.word_length, exclusive=True) + tf.range(num_words)  # strictly rising
    padded_g = _padded(g, 0)
    g_first = tf.gather(padded_g, tf.minimum(first_word, num_words))

    def context_offset(position):
      target = position + g_first
      word = tf.searchsorted(g[tf.newaxis], target[tf.newaxis], side="right",
                             out_type=tf.int64)[0] - 1
      word = tf.clip_by_value(word, 0, num_words)
      return tf.gather(_padded(w.word_start, 0), word) + target - tf.gather(padded_g, word)

    start = tf.cast(context_offset(first_char), tf.int32)
    end = tf.cast(context_offset(last_char) + 1, tf.int32)
    return text, start, end


class _Windows(NamedTuple):
  """Steps 1-3 of a batch: words (N), pieces, the question's ids and the windows (T)."""
  batch: tf.Tensor  # B
  words: tf.Tensor  # [N] string
  word_start: tf.Tensor  # [N] code point offset in its context
  word_length: tf.Tensor  # [N] code points
  doc_ids: tf.Tensor  # [pieces] int32, every context's pieces one after the other
  piece_word: tf.Tensor  # [pieces] the word of each piece
  doc_start: tf.Tensor  # [B] each row's first piece
  query_ids: tf.Tensor  # [B, max_query_length] int32
  num_windows: tf.Tensor  # [B]
  win_row: tf.Tensor  # [T] the row of each window
  win_start: tf.Tensor  # [T] its first piece within its row's context
  win_len: tf.Tensor  # [T] its context pieces
  doc_offset: tf.Tensor  # [T] the position of its first context piece


class _Grid(NamedTuple):
  """The windows' positions [T, S] (step 4)."""
  p: tf.Tensor  # [1, S] position
  off: tf.Tensor  # [T, 1] doc_offset
  length: tf.Tensor  # [T, 1] win_len
  in_doc: tf.Tensor  # [T, S] a context piece of the window
  token_index: tf.Tensor  # [T, S] its global piece index


class _Best(NamedTuple):
  """The best span of every row (step 6): its window (a global window index) and its start
  and end positions in that window."""
  has_candidate: tf.Tensor  # [B] bool
  best: tf.Tensor  # [B] float64, -inf without a candidate
  window: tf.Tensor  # [B] global window index
  start: tf.Tensor  # [B] position in the window
  end: tf.Tensor  # [B]
  start_logit: tf.Tensor  # [B] float64, 0 without a candidate
  end_logit: tf.Tensor
  score: tf.Tensor


def _num_chars(text: tf.Tensor) -> tf.Tensor:
  return tf.cast(tf.strings.length(text, unit="UTF8_CHAR"), tf.int64)


def _project(args):
  """get_final_text for one row: (first, last) code point index of the answer in orig_text.

  pred_text is looked up in tok_text (its first occurrence, as str.find); the found characters
  are mapped to orig_text through the characters that are not " ". Whenever the original falls
  back to orig_text whole (not found, different counts of non-space characters, a start or end
  on a space), the result is (0, len(orig_text) - 1).
  """
  pred_text, tok_text, orig_text = args
  pred_len = _num_chars(pred_text)
  # An empty separator would split on whitespace: look for a string tok_text cannot hold then
  # (the original also falls back for an empty pred_text: its end position is -1).
  parts = tf.strings.split(tok_text, sep=tf.where(pred_len > 0, pred_text, "\n\n"),
                           maxsplit=1)
  found = (pred_len > 0) & tf.equal(tf.size(parts), 2)
  begin = _num_chars(parts[0])
  finish = begin + pred_len - 1
  tok_ns = tf.not_equal(tf.strings.unicode_decode(tok_text, "UTF-8"), 32)
  orig_ns = tf.not_equal(tf.strings.unicode_decode(orig_text, "UTF-8"), 32)
  orig_len = tf.shape(orig_ns, out_type=tf.int64)[0]
  tok_len = tf.shape(tok_ns, out_type=tf.int64)[0]
  same_count = tf.equal(tf.reduce_sum(tf.cast(tok_ns, tf.int64)),
                        tf.reduce_sum(tf.cast(orig_ns, tf.int64)))
  padded_tok_ns = tf.concat([tok_ns, [False]], axis=0)
  begin = tf.clip_by_value(begin, 0, tok_len)
  finish = tf.clip_by_value(finish, 0, tok_len)
  on_chars = tf.gather(padded_tok_ns, begin) & tf.gather(padded_tok_ns, finish)
  ns_before = tf.math.cumsum(tf.cast(padded_tok_ns, tf.int64), exclusive=True)
  orig_positions = tf.concat([tf.where(orig_ns)[:, 0], [0]], axis=0)
  num_ns = tf.shape(orig_positions, out_type=tf.int64)[0] - 1
  first = tf.gather(orig_positions, tf.minimum(tf.gather(ns_before, begin), num_ns))
  last = tf.gather(orig_positions, tf.minimum(tf.gather(ns_before, finish), num_ns))
  ok = found & same_count & on_chars
  return tf.where(ok, first, 0), tf.where(ok, last, orig_len - 1)


@dataclasses.dataclass(frozen=True)
class AnswerSettings:
  """What a question-answering export fixes in its graph: run_squad's flags of the same names
  (seq_length is its max_seq_length); QuestionAnsweringModule's arguments besides the tokenizer
  and the model."""
  do_lower_case: bool
  seq_length: int
  doc_stride: int
  max_query_length: int
  n_best_size: int
  max_answer_length: int
  version_2_with_negative: bool
  null_score_diff_threshold: float


def export_squad_model(model: keras.Model, config: BertConfig, vocab_file: str, export_dir: str,
                       answers: AnswerSettings, *, version: Optional[int] = None,
                       model_name: str = "squad", task_info: Optional[Mapping[str, Any]] = None,
                       warmup: bool = True, length_buckets: Optional[str] = "auto") -> str:
  """Writes a raw-text question-answering SavedModel in TF Serving's layout.

  Args:
    model: the trained span model (head.build_span_model) in float32, built outside any
      distribution strategy.
    config: its BertConfig.
    vocab_file: the vocab it was fine-tuned with (an asset of the export).
    export_dir: the model base directory; the version goes to <export_dir>/<model_name>/<v>/.
    answers: run_squad's flags that the graph fixes (AnswerSettings).
    version: default one more than the largest already there.
    model_name: the directory name under export_dir.
    task_info: written as assets/task_info.json.
    warmup: write TF Serving warm-up requests.
    length_buckets: --length_buckets: windows run cut to the longest one rounded up to a
      bucket (saved_model.export_serving_models).

  Returns:
    The version directory written.
  """
  info = dict(kind="squad", doc_stride=int(answers.doc_stride),
              max_query_length=int(answers.max_query_length),
              n_best_size=int(answers.n_best_size),
              max_answer_length=int(answers.max_answer_length),
              version_2_with_negative=bool(answers.version_2_with_negative),
              null_score_diff_threshold=float(answers.null_score_diff_threshold))
  inputs = dict(question=np.array([q.encode("utf-8") for q in WARMUP_QUESTIONS], object),
                context=np.array([c.encode("utf-8") for c in WARMUP_CONTEXTS], object))
  return tf_serving.export_task_module(
      lambda packer: QuestionAnsweringModule(packer, model, **dataclasses.asdict(answers)),
      config, vocab_file, export_dir, do_lower_case=answers.do_lower_case,
      seq_length=answers.seq_length, version=version, model_name=model_name, info=info,
      task_info=task_info, warmup_inputs=lambda name: inputs, warmup=warmup,
      length_buckets=length_buckets)
