"""Packing tokenized text into BERT's inputs, in-graph: [CLS] A [SEP] (B [SEP]), padded.

Follows the original run_classifier.py (`convert_single_example`, `_truncate_seq_pair`): a pair
over the budget (seq_length - 3) loses tokens from the end of the longer segment one at a time
(B when they tie); a single text keeps its first seq_length - 2 tokens. The result is the three
int32 inputs every Keras model here takes (TF Hub's names): input_word_ids, input_mask,
input_type_ids.
"""

from typing import Dict, Optional, Sequence

import tensorflow as tf

from bert_tf import length_buckets as length_buckets_lib
from bert_tf.text import InGraphTokenizer

MASK_TOKEN = "[MASK]"


# Shape legend: B = batch, S = padded sequence length, (n) = ragged dimension.


def truncated_lengths(len_a: tf.Tensor, len_b: tf.Tensor, seq_length: tf.Tensor,
                      has_b: Optional[tf.Tensor] = None):
  """Segment lengths after the original's truncation, per row.

  For a pair the original pops the last token of the longer segment (B on a tie) until
  len_a + len_b <= seq_length - 3. The loop's result in closed form: A keeps
  min(len_a, max(budget - len_b, ceil(budget / 2))) tokens and B the rest of the budget. A row
  without B is a single segment with budget seq_length - 2.

  Args:
    len_a, len_b, seq_length: int32 [B].
    has_b: bool [B], the rows that are pairs; None: those whose len_b is above 0.

  Returns:
    (kept_a, kept_b), int32 [B].
  """
  if has_b is None:
    has_b = len_b > 0
  budget = seq_length - 2 - tf.cast(has_b, tf.int32)
  pair_a = tf.minimum(len_a, tf.maximum(budget - len_b, (budget + 1) // 2))
  kept_a = tf.where(has_b, pair_a, tf.minimum(len_a, budget))
  kept_b = tf.minimum(len_b, budget - kept_a)
  return kept_a, kept_b


def _column(value: int, rows: tf.Tensor, present: Optional[tf.Tensor] = None) -> tf.RaggedTensor:
  """A ragged [rows, (0 or 1)] holding `value` where `present` (default: every row)."""
  if present is None:
    present = tf.ones([rows], tf.bool)
  lengths = tf.cast(present, tf.int64)
  return tf.RaggedTensor.from_row_lengths(
      tf.fill([tf.reduce_sum(lengths)], tf.constant(value, tf.int32)), lengths)


class Packer(tf.Module):
  """Tokenizes raw text in-graph and packs it into the encoder's inputs."""

  def __init__(self, vocab_file: str, do_lower_case: bool, max_seq_length: int,
               name: Optional[str] = None,
               length_buckets: Optional[Sequence[int]] = None):
    """Builds the packer.

    Args:
      vocab_file: the WordPiece vocab (id = line number); any tf.io.gfile path.
      do_lower_case: lower-case and strip accents, like the original's flag.
      max_seq_length: the largest seq_length accepted (the model's max_position_embeddings).
      name: module name.
      length_buckets: boundaries (bert_tf.length_buckets) for pack(pad_to=<int>): a batch is
        then padded to its longest packed row rounded up to a boundary (at most pad_to), not
        to pad_to. None: always pad_to.
    """
    super().__init__(name=name)
    self.tokenizer = InGraphTokenizer(vocab_file, do_lower_case=do_lower_case,
                                      out_type=tf.int32, drop_invalid_utf8=True)
    for token in ("[CLS]", "[SEP]", "[PAD]"):
      if token not in self.tokenizer.vocab:
        raise ValueError(f"vocab file {vocab_file} has no {token} token, needed for packing")
    self.cls_id = self.tokenizer.cls_id
    self.sep_id = self.tokenizer.sep_id
    self.pad_id = self.tokenizer.pad_id
    self.mask_id = self.tokenizer.mask_id
    self.max_seq_length = int(max_seq_length)
    self.length_buckets = None if length_buckets is None else tuple(length_buckets)

  def width(self, longest: tf.Tensor, pad_to: int) -> tf.Tensor:
    """The padded width for a batch whose longest row is `longest` (int32 scalar): the
    bucket at or above it, at most pad_to; pad_to itself without length_buckets."""
    if self.length_buckets is None:
      return tf.constant(pad_to, tf.int32)
    boundaries = [b for b in self.length_buckets if b < pad_to] + [pad_to]
    return length_buckets_lib.bucket_width_tensor(longest, boundaries)

  def tokenize(self, text: tf.Tensor) -> tf.RaggedTensor:
    """[B] strings -> ids [B, (n)] (the reference FullTokenizer's ids)."""
    return self.tokenizer.tokenize(text)

  def tokenize_with_masks(self, text: tf.Tensor) -> tf.RaggedTensor:
    """Like tokenize, but each literal "[MASK]" in the text becomes the [MASK] id.

    The reference tokenizer would split "[MASK]" into "[", "mask", "]", so the text is cut at
    each "[MASK]", the pieces tokenized, and a [MASK] id put between consecutive pieces.
    """
    if self.mask_id is None:
      raise ValueError("the vocab has no [MASK] token, so fill_mask cannot be exported")
    pieces = tf.strings.split(text, sep=MASK_TOKEN)  # [B, (pieces)]
    piece_ids = self.tokenizer.tokenize(pieces.flat_values)  # [pieces, (n)]
    in_row = tf.ragged.range(pieces.row_lengths()).flat_values
    row_length = tf.repeat(pieces.row_lengths(), pieces.row_lengths())
    not_last = in_row < row_length - 1
    rows = tf.shape(piece_ids.row_splits, out_type=tf.int32)[0] - 1
    piece_ids = tf.concat([piece_ids, _column(self.mask_id, rows, not_last)], axis=1)
    return tf.RaggedTensor.from_row_splits(
        piece_ids.values, tf.gather(piece_ids.row_splits, pieces.row_splits))

  def pack(self, ids_a: tf.RaggedTensor, ids_b: Optional[tf.RaggedTensor],
           seq_length: tf.Tensor, pad_to: Optional[int] = None,
           always_pair: bool = False) -> Dict[str, tf.Tensor]:
    """Truncates and packs ids into [CLS] A [SEP] (B [SEP]), padded.

    Args:
      ids_a: int32 [B, (n)], the first segments.
      ids_b: int32 [B, (m)] or None; an empty row means no second segment, unless
        always_pair.
      seq_length: int32 [B], the packed length of each row (at least 2, or 3 with a B).
      pad_to: the width to pad to: a Python int (a static shape, or with length_buckets the
        bucket of the longest row, at most pad_to), a scalar int tensor, or None for
        max(seq_length) (0 for an empty batch).
      always_pair: every row is a pair, an empty B too: [CLS] A [SEP] [SEP], truncated to
        seq_length - 3 (a multiple-choice example's choice, as its records lay it out).

    Returns:
      dict of int32 [B, S]: input_word_ids, input_mask, input_type_ids.
    """
    if ids_b is None:
      return self._pack_single(ids_a, seq_length, pad_to)
    rows = tf.shape(ids_a.row_splits, out_type=tf.int32)[0] - 1
    len_a = tf.cast(ids_a.row_lengths(), tf.int32)
    len_b = tf.cast(ids_b.row_lengths(), tf.int32)
    has_b = tf.ones_like(len_b, tf.bool) if always_pair else len_b > 0
    with tf.control_dependencies(self._batch_checks(rows, len_b, seq_length)):
      checks = self._length_checks(seq_length, has_b)
    with tf.control_dependencies(checks):
      kept_a, kept_b = truncated_lengths(len_a, len_b, seq_length, has_b)
    # Like the original, a B truncated to nothing gets no [SEP] of its own (a pair always does).
    has_sep_b = has_b if always_pair else kept_b > 0
    row_lengths = 2 + kept_a + kept_b + tf.cast(has_sep_b, tf.int32)
    width = self._pad_width(pad_to, seq_length, row_lengths)
    # Built densely, position by position (a row: [CLS] A [SEP] B [SEP] padding): a few dense
    # ops, where concatenating ragged pieces made hundreds (and a slower trace of every export).
    shape = [None, width] if isinstance(width, int) else tf.stack([rows, width])
    dense_a = ids_a.to_tensor(default_value=self.pad_id, shape=shape)
    dense_b = ids_b.to_tensor(default_value=self.pad_id, shape=shape)
    position = tf.range(width)[tf.newaxis, :] + tf.zeros([rows, 1], tf.int32)  # [B, S]
    end_a = kept_a[:, tf.newaxis] + 1  # the position of A's [SEP], [B, 1]
    end_b = end_a + kept_b[:, tf.newaxis] + 1  # of B's [SEP] (when B kept a token)
    last = tf.maximum(width - 1, 0)
    from_a = tf.gather(dense_a, tf.clip_by_value(position - 1, 0, last), batch_dims=1)
    from_b = tf.gather(dense_b, tf.clip_by_value(position - end_a - 1, 0, last), batch_dims=1)
    in_b = (position > end_a) & (position < end_b)
    is_sep = (position == end_a) | ((position == end_b) & has_sep_b[:, tf.newaxis])
    real = position < row_lengths[:, tf.newaxis]
    word_ids = tf.where(position == 0, self.cls_id,
                        tf.where(is_sep, self.sep_id,
                                 tf.where(position < end_a, from_a,
                                          tf.where(in_b, from_b, self.pad_id))))
    return dict(
        input_word_ids=tf.where(real, word_ids, self.pad_id),
        input_mask=tf.cast(real, tf.int32),
        input_type_ids=tf.cast(real & (position > end_a), tf.int32))

  def _pack_single(self, ids_a: tf.RaggedTensor, seq_length, pad_to) -> Dict[str, tf.Tensor]:
    """pack() without a second segment: [CLS] A [SEP] padding, in about a fifth of the pair
    layout's ops (a served text pays for each op, whatever its size). seq_length may also be a
    Python int, checked here rather than by ops in the graph."""
    len_a = tf.cast(ids_a.row_lengths(), tf.int32)
    if isinstance(seq_length, int):
      if not 2 <= seq_length <= self.max_seq_length:
        raise ValueError(f"seq_length must be in [2, {self.max_seq_length}] (the model's "
                         f"max_position_embeddings), got {seq_length}")
      kept_a = tf.minimum(len_a, seq_length - 2)
    else:
      with tf.control_dependencies(self._length_checks(seq_length, False)):
        kept_a = tf.minimum(len_a, seq_length - 2)
    end_a = kept_a + 1  # the position of the [SEP]
    width = self._pad_width(pad_to, seq_length, end_a + 1)
    shape = [None, width] if isinstance(width, int) else tf.stack([tf.size(len_a), width])
    dense_a = ids_a.to_tensor(default_value=self.pad_id, shape=shape)
    # Position p holds A's token p - 1 (p >= 1) and [CLS] at 0.
    shifted = tf.pad(dense_a, [[0, 0], [1, 0]], constant_values=self.cls_id)[:, :width]
    position = tf.range(width)[tf.newaxis, :]  # [1, S]
    end_a = end_a[:, tf.newaxis]
    word_ids = tf.where(position < end_a, shifted,
                        tf.where(position == end_a, self.sep_id, self.pad_id))
    mask = tf.cast(position <= end_a, tf.int32)
    return dict(input_word_ids=word_ids, input_mask=mask, input_type_ids=tf.zeros_like(mask))

  def _length_checks(self, seq_length: tf.Tensor, has_b) -> list:
    """The asserts that every row's seq_length fits the model and its special tokens."""
    return [
        tf.debugging.assert_less_equal(
            seq_length, self.max_seq_length,
            message=f"seq_length must be at most {self.max_seq_length} (the model's "
                    "max_position_embeddings)"),
        tf.debugging.assert_greater_equal(
            seq_length, 2 + tf.cast(has_b, tf.int32),
            message="seq_length must be at least 2 (3 for a text pair): [CLS] and [SEP] "
                    "need room"),
    ]

  @staticmethod
  def _batch_checks(rows: tf.Tensor, len_b: tf.Tensor, seq_length) -> list:
    """The asserts that a pair batch's inputs line up: one text_b per text, and one seq_length
    per text or a single one for all of them."""
    checks = [tf.debugging.assert_equal(
        tf.size(len_b), rows,
        message="text_b must have one entry per text (an empty string for a single text); "
                "the sizes of text_b and text are")]
    if not isinstance(seq_length, int):
      size = tf.size(seq_length)
      checks.append(tf.debugging.assert_equal(
          (size == rows) | (size == 1), True,
          message="seq_length must have one entry per text, or one entry for all of them; "
                  "its size does not match text's"))
    return checks

  def _pad_width(self, pad_to, seq_length, row_lengths: tf.Tensor):
    """The padded width (pack's pad_to rule) for rows of `row_lengths` packed positions."""
    if pad_to is None:
      if isinstance(seq_length, int):
        return seq_length
      return tf.reduce_max(tf.concat([seq_length, [0]], axis=0))
    if isinstance(pad_to, int) and self.length_buckets is not None:
      return self.width(tf.reduce_max(tf.concat([row_lengths, [0]], axis=0)), pad_to)
    if isinstance(pad_to, int):
      return pad_to
    return tf.cast(pad_to, tf.int32)
