"""Dynamic masking: pretraining batches re-masked on the fly with the original's rules
(--dynamic_masking)."""

import dataclasses
from typing import Dict, Mapping

import tensorflow as tf

from bert_tf import record_schema
from bert_tf.training.record_files import InputError

# === Dynamic masking ===


@dataclasses.dataclass(frozen=True)
class DynamicMasking:
  """Re-masks every batch on the fly (RoBERTa-style) with the original's masking rules.

  Attributes:
    vocab_size: random replacements are drawn uniformly from [0, vocab_size), special tokens
      included, as in the original.
    mask_id, cls_id, sep_id, pad_id: ids of [MASK], [CLS], [SEP], [PAD].
    masked_lm_prob: fraction of the tokens (counting [CLS] and [SEP]) to predict.
    seed: masks are a deterministic function of (seed, batch index, input pipeline).
  """
  vocab_size: int
  mask_id: int
  cls_id: int
  sep_id: int
  pad_id: int = 0
  masked_lm_prob: float = 0.15
  seed: int = 12345

  @classmethod
  def from_vocab(cls, vocab: Mapping[str, int], **kwargs) -> "DynamicMasking":
    """Takes the special token ids from a token -> id vocab (tokenization.load_vocab)."""
    try:
      ids = {name: vocab[token] for name, token in (
          ("mask_id", "[MASK]"), ("cls_id", "[CLS]"), ("sep_id", "[SEP]"), ("pad_id", "[PAD]"))}
    except KeyError as e:
      raise InputError(f"dynamic masking needs the token {e.args[0]} in the vocab") from None
    return cls(vocab_size=len(vocab), **ids, **kwargs)


def _restore_original_ids(input_ids, positions, ids, weights):
  """Undoes the masking stored in the record: puts masked_lm_ids back at their positions."""
  # [B, P, L] one-hot of the real prediction slots (padding slots have weight 0).
  seq_length = tf.shape(input_ids)[1]
  slots = tf.one_hot(positions, seq_length, dtype=tf.int32) * tf.cast(
      weights > 0, tf.int32)[:, :, None]
  is_masked = tf.reduce_sum(slots, axis=1) > 0  # [B, L]
  stored = tf.reduce_sum(slots * ids[:, :, None], axis=1)  # [B, L]
  return tf.where(is_masked, stored, input_ids)


def apply_dynamic_masking(batch: Mapping[str, tf.Tensor], config: DynamicMasking,
                          seed: tf.Tensor) -> Dict[str, tf.Tensor]:
  """Draws new masked-LM predictions for a parsed batch (int32 features, static shapes).

  For each example: num_to_predict = min(P, max(1, round(num_tokens * masked_lm_prob))), taken
  uniformly among the real tokens other than [CLS], [SEP] and [PAD]; each chosen token becomes
  [MASK] with probability 0.8, stays itself with 0.1, and becomes a uniformly random id with
  0.1. Positions are sorted; unused slots are zero with weight 0.

  Args:
    batch: canonical name -> tensor, as produced by the pipeline before masking.
    config: the masking settings.
    seed: int64 [2] seed for tf.random.stateless_* (different per batch).

  Returns:
    A copy of `batch` with input_ids and the masked_lm_* features replaced.
  """
  input_ids = batch[record_schema.INPUT_IDS]  # [B, L]
  input_mask = batch[record_schema.INPUT_MASK]
  positions = batch[record_schema.MASKED_LM_POSITIONS]  # [B, P]
  num_slots = positions.shape[1]
  seq_length = input_ids.shape[1]
  original = _restore_original_ids(input_ids, positions, batch[record_schema.MASKED_LM_IDS],
                                   batch[record_schema.MASKED_LM_WEIGHTS])

  seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), num=4)
  shape = tf.shape(input_ids)
  is_candidate = ((input_mask > 0) & (original != config.cls_id) & (original != config.sep_id)
                  & (original != config.pad_id))
  # tf.round rounds half to even, like Python 3's round() in the original.
  num_tokens = tf.cast(tf.reduce_sum(input_mask, axis=1), tf.float32)
  num_to_predict = tf.minimum(
      num_slots, tf.maximum(1, tf.cast(tf.round(num_tokens * config.masked_lm_prob), tf.int32)))
  num_to_predict = tf.minimum(num_to_predict,
                              tf.reduce_sum(tf.cast(is_candidate, tf.int32), axis=1))  # [B]

  # A uniform random key per candidate, -1 for the rest: the top P keys are a uniform sample of
  # the candidates, of which the first num_to_predict are kept.
  keys = tf.where(is_candidate, tf.random.stateless_uniform(shape, seeds[0]), -1.0)
  _, chosen = tf.math.top_k(keys, k=num_slots, sorted=True)  # [B, P]
  keep = tf.range(num_slots)[None, :] < num_to_predict[:, None]  # [B, P]
  # Sort the kept positions; unused slots sort last (as seq_length) and then become 0.
  new_positions = tf.sort(tf.where(keep, chosen, seq_length), axis=1)
  weights = tf.cast(new_positions < seq_length, tf.float32)
  new_positions = tf.where(weights > 0, new_positions, 0)
  labels = tf.where(weights > 0, tf.gather(original, new_positions, batch_dims=1), 0)

  # 80% [MASK], 10% unchanged, 10% random id, decided per chosen token.
  slot_shape = tf.shape(new_positions)
  u_mask = tf.random.stateless_uniform(slot_shape, seeds[1])
  u_keep = tf.random.stateless_uniform(slot_shape, seeds[2])
  random_ids = tf.random.stateless_uniform(slot_shape, seeds[3], minval=0,
                                           maxval=config.vocab_size, dtype=tf.int32)
  replacement = tf.where(u_mask < 0.8, config.mask_id, tf.where(u_keep < 0.5, labels, random_ids))
  # Scatter the replacements into the sequence through a one-hot [B, P, L] (slots are distinct).
  slot_one_hot = tf.one_hot(new_positions, seq_length, dtype=tf.int32) * tf.cast(
      weights, tf.int32)[:, :, None]
  is_replaced = tf.reduce_sum(slot_one_hot, axis=1) > 0
  replaced_ids = tf.where(is_replaced,
                          tf.reduce_sum(slot_one_hot * replacement[:, :, None], axis=1), original)

  out = dict(batch)
  out[record_schema.INPUT_IDS] = replaced_ids
  out[record_schema.MASKED_LM_POSITIONS] = new_positions
  out[record_schema.MASKED_LM_IDS] = labels
  out[record_schema.MASKED_LM_WEIGHTS] = weights
  return out
