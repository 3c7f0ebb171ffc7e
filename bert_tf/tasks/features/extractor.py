"""extract_features' model: the encoder loaded from any checkpoint and the FeatureExtractor
that runs it on padded or packed batches (the run is in run.py)."""

import re
from typing import Dict, List, Mapping, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf

from bert_tf import length_buckets as length_buckets_lib
from bert_tf import row_packing
from bert_tf.config import BertConfig
from bert_tf.model import checkpoints
from bert_tf.model.encoder import build_encoder
from bert_tf.model.layers import dtype_policy
from bert_tf.tasks.features.inputs import InputFeatures
from bert_tf.training import distribution
from bert_tf.tasks.features.settings import (FeatureExtractionError, PACKINGS, POOLINGS,
                                              parse_layers)


# === The model ===


def load_encoder(config: BertConfig, init_checkpoint: str, packed: bool = False) -> keras.Model:
  """build_encoder(config, packed=packed) with the weights of init_checkpoint (any format
  load_weights reads; a packed encoder has the same weights).

  Raises:
    FeatureExtractionError: a checkpoint that lacks encoder weights or has other shapes (only
      the pooler, which extraction does not use, may be missing).
  """
  encoder = build_encoder(config, packed=packed)
  report = checkpoints.load_weights(encoder, init_checkpoint, strict=False)
  missing = [name for name in report.missing if not name.startswith("bert/pooler/")]
  if missing or report.mismatched:
    raise FeatureExtractionError(
        f"--init_checkpoint={init_checkpoint} does not hold this model's encoder weights "
        f"(--bert_config_file another model's?): {report.summary()}")
  return encoder


def is_packed_encoder(encoder: keras.Model) -> bool:
  """Whether encoder is a build_encoder(..., packed=True) (it takes packed rows' positions)."""
  names = encoder.input.keys() if isinstance(encoder.input, dict) else \
      [tensor.name for tensor in encoder.inputs]
  return row_packing.POSITION_IDS in names


def packed_copy(encoder: keras.Model) -> keras.Model:
  """build_encoder(config, packed=True) holding encoder's weights (moved by their original
  names), in encoder's dtype policy."""
  with dtype_policy(encoder.get_layer("layer_0").dtype_policy.name):
    packed = build_encoder(checkpoints.config_from_model(encoder), name=encoder.name,
                           packed=True)
  checkpoints.set_original_weights(packed, checkpoints.get_original_weights(encoder),
                                   strict=False, source=encoder.name)
  return packed


class FeatureExtractor:
  """Runs the encoder on padded (or packed) batches and returns the chosen layers (optionally
  pooled).

  Only the graph up to the deepest layer asked is computed (no pooler). Inference only:
  dropout is off (training=False). real_positions and computed_positions count the real tokens
  and the positions the model computed (dummy rows and padding included) over every
  run_features call.
  """

  def __init__(self, encoder: keras.Model, layers: Sequence[int], pooling: str = "none",
               strategy: Optional[tf.distribute.Strategy] = None, jit_compile: bool = False,
               length_buckets: Optional[Sequence[int]] = None, packing: str = row_packing.NONE):
    """Builds the sub-model that ends at the deepest block asked.

    Args:
      encoder: a model from build_encoder (its layers named layer_0 ... layer_{L-1}); packed
        (build_encoder(..., packed=True)) for packing exact, else a packed copy is made.
      layers: indexes into the block outputs (parse_layers' result).
      pooling: none, cls or mean.
      strategy: where to run (default: the current one); the batch is split over its replicas.
      jit_compile: compile the forward pass with XLA.
      length_buckets: run_features cuts each batch to its longest row rounded up to one of
        these lengths (bert_tf.length_buckets); None: the features' length. With packing, the
        row widths to choose from (with the features' length).
      packing: none (one line per row) or exact (each batch's lines packed into the fewest
        rows, bert_tf.row_packing).
    """
    self.length_buckets = None if length_buckets is None else tuple(length_buckets)
    if pooling not in POOLINGS:
      raise FeatureExtractionError(f"--pooling must be one of {', '.join(POOLINGS)}")
    if packing not in PACKINGS:
      raise FeatureExtractionError(f"--packing must be one of {', '.join(PACKINGS)} for "
                                   f"extract_features, got {packing!r}")
    self.packing = packing
    self.real_positions = 0
    self.computed_positions = 0
    num_layers = len([layer for layer in encoder.layers if re.fullmatch(r"layer_\d+", layer.name)])
    self.layers = parse_layers(layers, num_layers)
    self.pooling = pooling
    self.strategy = strategy or tf.distribute.get_strategy()
    blocks = sorted({i % num_layers for i in self.layers})
    self._order = [blocks.index(i % num_layers) for i in self.layers]
    with self.strategy.scope():
      if packing == row_packing.EXACT:
        if not is_packed_encoder(encoder):
          encoder = packed_copy(encoder)
        # The [CLS] positions only feed the pooler, which extraction never runs.
        inputs = {key: value for key, value in encoder.input.items()
                  if key != row_packing.CLS_POSITIONS}
        forward = self._packed_forward
      elif is_packed_encoder(encoder):
        raise FeatureExtractionError("a packed encoder needs packing=exact")
      else:
        inputs = encoder.input
        forward = self._forward
      outputs = [encoder.get_layer(f"layer_{b}").output for b in blocks]
      self._model = keras.Model(inputs, outputs, name="feature_extractor")
    self._step = tf.function(forward, jit_compile=jit_compile, reduce_retracing=True,
                             autograph=False)

  def _block_outputs(self, inputs) -> List[tf.Tensor]:
    """The asked layers' outputs in the order asked, float32 [B, S, H] each."""
    outputs = self._model(inputs, training=False)
    if not isinstance(outputs, (list, tuple)):
      outputs = [outputs]
    return [tf.cast(outputs[k], tf.float32) for k in self._order]

  def _replica_forward(self, inputs):
    values = tf.stack(self._block_outputs(inputs))  # [K, B, S, H]
    if self.pooling == "cls":
      return values[:, :, 0]  # [K, B, H]
    if self.pooling == "mean":
      mask = tf.cast(inputs["input_mask"], tf.float32)[None, :, :, None]  # [1, B, S, 1]
      count = tf.maximum(tf.reduce_sum(mask, axis=2), 1.0)  # dummy rows have no tokens
      return tf.reduce_sum(values * mask, axis=2) / count
    return values

  def _forward(self, inputs):
    outputs = self.strategy.run(self._replica_forward, args=(inputs,))
    return self.strategy.gather(outputs, axis=1)

  def _replica_packed_forward(self, inputs):
    """Packed rows [R, W] -> [K, R, W, H], or [K, R * M, H] pooled per slot (M examples per
    row at most, slot order)."""
    inputs = dict(inputs)
    cls_positions = inputs.pop(row_packing.CLS_POSITIONS)  # [R, M]
    outputs = self._block_outputs(inputs)
    if self.pooling == "none":
      return tf.stack(outputs)
    if self.pooling == "cls":
      pooled = [tf.gather(x, cls_positions, batch_dims=1) for x in outputs]  # [R, M, H] each
    else:  # mean over each slot's positions (input_mask holds the slot, 1..M)
      slots = tf.range(1, tf.shape(cls_positions)[1] + 1)
      member = tf.cast(inputs["input_mask"][:, None, :] == slots[None, :, None],
                       tf.float32)  # [R, M, W]
      count = tf.maximum(tf.reduce_sum(member, axis=2), 1.0)[:, :, None]  # empty slots: 0
      pooled = [tf.einsum("rmw,rwh->rmh", member, x) / count for x in outputs]
    values = tf.stack(pooled)  # [K, R, M, H]
    shape = tf.shape(values)
    return tf.reshape(values, [shape[0], shape[1] * shape[2], shape[3]])

  def _packed_forward(self, inputs):
    outputs = self.strategy.run(self._replica_packed_forward, args=(inputs,))
    return self.strategy.gather(outputs, axis=1)

  def _distribute(self, batch: Dict[str, np.ndarray]):
    """The [N, ...] arrays of batch, split over the replicas along N."""
    replicas = self.strategy.num_replicas_in_sync
    size = len(next(iter(batch.values())))
    if size % replicas:
      raise FeatureExtractionError(f"a batch of {size} does not split over {replicas} replicas "
                                   "(--batch_size must be a multiple of them)")
    per = distribution.BatchShares(size, replicas).per_replica

    def part(ctx):
      start = ctx.replica_id_in_sync_group * per
      return {key: value[start:start + per] for key, value in batch.items()}

    return self.strategy.experimental_distribute_values_from_function(part)

  def __call__(self, input_ids: np.ndarray, input_mask: np.ndarray,
               input_type_ids: np.ndarray) -> np.ndarray:
    """[B, S] int arrays -> float32 [K, B, S, H], or [K, B, H] with pooling.

    B must be a multiple of the strategy's replicas (run_batches pads every batch to
    batch_size).
    """
    if self.packing != row_packing.NONE:
      raise FeatureExtractionError("a packed FeatureExtractor takes packed rows: call "
                                   "run_features or run_packed")
    inputs = self._distribute(dict(input_word_ids=np.asarray(input_ids, np.int32),
                                   input_mask=np.asarray(input_mask, np.int32),
                                   input_type_ids=np.asarray(input_type_ids, np.int32)))
    return np.asarray(self._step(inputs))

  def run_packed(self, rows: Mapping[str, np.ndarray]) -> np.ndarray:
    """Packed rows (row_packing.pack_arrays' input_word_ids, input_mask holding slots,
    input_type_ids, input_position_ids [R, W] and packed_cls_positions [R, M]) -> float32
    [K, R, W, H] per position of the rows, or [K, R * M, H] per slot with pooling. R must be
    a multiple of the strategy's replicas."""
    keys = ("input_word_ids", "input_mask", "input_type_ids", row_packing.POSITION_IDS,
            row_packing.CLS_POSITIONS)
    if self.packing != row_packing.EXACT:
      raise FeatureExtractionError("packed rows need a FeatureExtractor with packing=exact")
    inputs = self._distribute({key: np.asarray(rows[key], np.int32) for key in keys})
    return np.asarray(self._step(inputs))

  def _widths(self, seq_length: int) -> List[int]:
    """The lengths a batch of features of seq_length may be cut to (seq_length the last)."""
    if self.length_buckets is None:
      return [seq_length]
    return [b for b in self.length_buckets if b < seq_length] + [seq_length]

  def run_features(self, features: Sequence[InputFeatures], batch_size: Optional[int] = None
                   ) -> np.ndarray:
    """The outputs of n InputFeatures of one seq_length: float32 [K, n, S', H], or [K, n, H]
    with pooling; each feature's token values at its own positions 0 .. tokens - 1.

    Unpacked, the batch is padded to batch_size with dummy rows (dropped from the result) so
    every call has the same batch size. With length_buckets the positions after the bucket of
    the longest row are not computed: S' is that bucket (every real token is in it). Packed
    (exact), the features are packed into rows (_run_packed_features) and S' is the longest
    feature's length (zeros past each feature's tokens).
    """
    size = batch_size or len(features)
    if len(features) > size:
      raise ValueError(f"{len(features)} features in a batch of {size}")
    seq_length = len(features[0].input_ids)
    lengths = [int(np.count_nonzero(feature.input_mask)) for feature in features]
    self.real_positions += sum(lengths)
    if self.packing == row_packing.EXACT:
      return self._run_packed_features(features, lengths, size)
    if self.length_buckets is not None:
      seq_length = length_buckets_lib.bucket_for(max(lengths), self._widths(seq_length))
    arrays = [np.zeros((size, seq_length), np.int32) for _ in range(3)]
    for row, feature in enumerate(features):
      arrays[0][row] = feature.input_ids[:seq_length]
      arrays[1][row] = feature.input_mask[:seq_length]
      arrays[2][row] = feature.input_type_ids[:seq_length]
    self.computed_positions += size * seq_length
    return self(*arrays)[:, :len(features)]

  def _run_packed_features(self, features: Sequence[InputFeatures], lengths: Sequence[int],
                           batch_size: int) -> np.ndarray:
    """run_features on packed rows: the fewest rows (first-fit decreasing) in the narrowest
    width among the buckets (and seq_length) that needs no more of them
    and the row count rounded up to the ladder of a full batch and then to a multiple of the
    replicas (row_packing.exact_shape, as packed_rows.pack_batch for tf.data); the outputs
    moved back to each feature's positions."""
    seq_length = len(features[0].input_ids)
    per_row = row_packing.MAX_EXAMPLES_PER_ROW
    width, count = row_packing.exact_shape(lengths, self._widths(seq_length), batch_size,
                                           per_row, self.strategy.num_replicas_in_sync)
    columns = (("input_word_ids", "input_ids"), ("input_mask", "input_mask"),
               ("input_type_ids", "input_type_ids"))
    tokens = {key: np.array([getattr(f, name)[:width] for f in features], np.int32)
              for key, name in columns}
    n = len(features)
    # Which line is in which slot: pack_arrays returns per-example features in slot order.
    rows = row_packing.pack_arrays(tokens, {"index": np.arange(n)}, width, rows=count,
                                   max_per_row=per_row, fill={"index": -1})
    self.computed_positions += rows["input_word_ids"].shape[0] * width
    values = self.run_packed(rows)  # [K, R, W, H], or [K, R * M, H] pooled
    filled = np.flatnonzero(rows["index"] >= 0)
    slot_of = np.empty(n, np.int64)
    slot_of[rows["index"][filled]] = filled
    if self.pooling != "none":
      return values[:, slot_of]
    row, slot = np.divmod(slot_of, per_row)
    start = rows[row_packing.CLS_POSITIONS][row, slot]  # each line's first position in its row
    offsets = np.arange(max(lengths))
    real = offsets[None, :] < np.asarray(lengths)[:, None]  # [n, S']
    positions = np.where(real, start[:, None] + offsets[None, :], 0)
    out = values[:, row[:, None], positions]  # [K, n, S', H]
    out[:, ~real] = 0.0
    return out
