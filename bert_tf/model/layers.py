"""Keras 3 layers of the BERT encoder and of its masked-LM head, named like the original
checkpoint scopes.

Every layer follows the Keras dtype policy for its matmuls; softmax and LayerNorm run in float32
under the mixed policies because their reductions lose too much precision in 16 bits.

Shape legend used in comments:
  B = batch size, S = sequence length, H = hidden size, N = attention heads,
  D = head size (H / N), I = intermediate size, V = vocab size.
"""

import contextlib
import math
import threading

import keras
from keras import ops
import tensorflow as tf

from bert_tf.config import HIDDEN_ACTIVATIONS
from bert_tf.model import fused

# The additive value for padded key positions; the original uses -10000.0, not -inf, so padded
# rows still yield finite (uniform) probabilities.
MASK_ADDER = -10000.0
LAYER_NORM_EPSILON = 1e-12


# === Helpers ===
def get_activation(name, training=None):
  """The activation function for a `hidden_act` value of BertConfig (see config.py).

  With training=True either GELU is a fused kernel of fused.py (same values to float rounding,
  faster gradient); inference graphs always use plain ops so that exports need no XLA.
  """
  name = name.lower()
  if name not in HIDDEN_ACTIVATIONS:
    raise ValueError(f"hidden_act {name!r} is not supported")
  function = HIDDEN_ACTIVATIONS[name].function
  if function == "gelu_tanh":
    if training and fused.ENABLED:
      return fused.gelu_tanh
    return lambda x: keras.activations.gelu(x, approximate=True)
  if function == "gelu_exact":
    if training and fused.ENABLED:
      return fused.gelu_exact
    return lambda x: keras.activations.gelu(x, approximate=False)
  return keras.activations.get(function)  # relu, tanh, silu, linear


_INITIAL_VALUES = threading.local()


def truncated_normal(stddev):
  """The original's initializer (truncated at 2 stddev); a new object per sublayer; zeros
  within zero_initial_values()."""
  if getattr(_INITIAL_VALUES, "zeros", False):
    return keras.initializers.Zeros()
  return keras.initializers.TruncatedNormal(stddev=stddev)


@contextlib.contextmanager
def zero_initial_values():
  """Within (this thread): the layers built here start from zeros instead of random values.

  For a model whose every weight is loaded right after it is built, and strictly (a frozen
  teacher, checkpoints.load_weights(strict=True)): drawing random values that the load then
  overwrites costs more CPU than the rest of building a small model's variables (about 0.8 s
  of 2 for a 6 x 384 BERT)."""
  before = getattr(_INITIAL_VALUES, "zeros", False)
  _INITIAL_VALUES.zeros = True
  try:
    yield
  finally:
    _INITIAL_VALUES.zeros = before


def float32_policy(policy):
  """The policy for numerically sensitive sublayers: float32 under a mixed policy."""
  policy = keras.dtype_policies.get(policy)
  if policy.compute_dtype in ("float16", "bfloat16"):
    return "float32"
  return policy


@contextlib.contextmanager
def dtype_policy(policy):
  """Keras' global dtype policy set to `policy` (a name or a policy) inside the block, the
  previous one restored afterwards: how every float32 export copy is built (float32_copy,
  serving.pretrained.float32_models) and every copy in another model's policy."""
  previous = keras.config.dtype_policy()
  keras.config.set_dtype_policy(policy)
  try:
    yield
  finally:
    keras.config.set_dtype_policy(previous)


def layer_norm(name, policy):
  return keras.layers.LayerNormalization(
      axis=-1, epsilon=LAYER_NORM_EPSILON, name=name, dtype=float32_policy(policy))


# === Layers ===
@keras.saving.register_keras_serializable(package="bert_tf")
class Dropout(keras.layers.Dropout):
  """Keras' Dropout with a cheaper mask when training: fused.dropout.

  Keras draws one float per element from TensorFlow's Philox generator, a measurable share of
  a small model's training step (benchmarks/README.md). fused.dropout spends one 32-bit hashed
  word on two elements inside one XLA kernel: an element is dropped when its 16-bit half is below
  round(rate * 2^16), so the drop probability is that over 2^16 (0.1 -> 0.1000061), and kept
  elements are scaled by 1 / (1 - p) for that p, so the expectation is exact. The seed comes
  from the layer's SeedGenerator as in Keras: runs are reproducible and each call draws a new
  mask. With BERT_TF_FUSED=0 this is Keras' Dropout unchanged. noise_shape is not supported.
  """

  def __init__(self, rate, noise_shape=None, seed=None, **kwargs):
    if noise_shape is not None:
      raise ValueError("bert_tf Dropout does not support noise_shape")
    super().__init__(rate, seed=seed, **kwargs)

  def next_seed(self):
    """The int32 [2] seed for the next mask (advances the SeedGenerator)."""
    return fused.int32_seed(self.seed_generator.next())

  def call(self, inputs, training=False):
    if not (training and fused.ENABLED) or self.rate <= 0:
      return super().call(inputs, training=training)
    if self.rate >= 1:
      return tf.zeros_like(inputs)
    return fused.dropout(inputs, self.rate, self.next_seed())


@keras.saving.register_keras_serializable(package="bert_tf")
class WordEmbedding(keras.layers.Layer):
  """Token embedding table [V, H]; called with reverse=True it projects hidden states to logits.

  The masked LM output layer reuses this table (weight tying), so the same layer object is
  called twice in the pretraining graph.
  """

  def __init__(self, vocab_size, hidden_size, initializer_range=0.02, **kwargs):
    super().__init__(**kwargs)
    self.vocab_size = vocab_size
    self.hidden_size = hidden_size
    self.initializer_range = initializer_range

  def build(self, input_shape=None):
    self.embeddings = self.add_weight(
        name="embeddings", shape=(self.vocab_size, self.hidden_size),
        initializer=truncated_normal(self.initializer_range))
    self.built = True

  def call(self, inputs, reverse=False):
    if reverse:
      # [B, P, H] x [V, H]^T -> [B, P, V]. transpose_b on a 2-D matmul avoids copying the
      # transposed [H, V] table in every forward and backward pass.
      table = ops.cast(self.embeddings, self.compute_dtype)
      shape = tf.shape(inputs)
      flat = tf.reshape(inputs, [-1, self.hidden_size])
      logits = tf.matmul(flat, table, transpose_b=True)
      logits = tf.reshape(logits, tf.concat([shape[:-1], [self.vocab_size]], axis=0))
      logits.set_shape(inputs.shape[:-1].concatenate([self.vocab_size]))
      return logits
    # [B, S] -> [B, S, H]; tf.gather gives sparse (IndexedSlices) gradients for the table.
    return ops.cast(tf.gather(self.embeddings, ops.cast(inputs, "int32")), self.compute_dtype)


  def get_config(self):
    config = super().get_config()
    config.update(vocab_size=self.vocab_size, hidden_size=self.hidden_size,
                  initializer_range=self.initializer_range)
    return config


@keras.saving.register_keras_serializable(package="bert_tf")
class EmbeddingPostprocessor(keras.layers.Layer):
  """Adds token type and learned position embeddings, then LayerNorm and dropout.

  Inputs: word embeddings [B, S, H] and token type ids [B, S]. Output: [B, S, H].
  """

  def __init__(self, hidden_size, type_vocab_size=2, max_position_embeddings=512,
               hidden_dropout_prob=0.1, initializer_range=0.02, **kwargs):
    super().__init__(**kwargs)
    self.hidden_size = hidden_size
    self.type_vocab_size = type_vocab_size
    self.max_position_embeddings = max_position_embeddings
    self.hidden_dropout_prob = hidden_dropout_prob
    self.initializer_range = initializer_range
    self.layer_norm = layer_norm("LayerNorm", self.dtype_policy)
    self.dropout = Dropout(hidden_dropout_prob, dtype=self.dtype_policy)

  def build(self, word_embeddings_shape, token_type_ids_shape=None, position_ids_shape=None):
    self.token_type_embeddings = self.add_weight(
        name="token_type_embeddings", shape=(self.type_vocab_size, self.hidden_size),
        initializer=truncated_normal(self.initializer_range))
    self.position_embeddings = self.add_weight(
        name="position_embeddings", shape=(self.max_position_embeddings, self.hidden_size),
        initializer=truncated_normal(self.initializer_range))
    self.layer_norm.build(word_embeddings_shape)
    self.built = True

  def call(self, word_embeddings, token_type_ids, position_ids=None, training=None):
    """position_ids [B, S]: each token's position in its example (packed rows); None for
    0, 1, ... along the row (the original)."""
    seq_length = tf.shape(word_embeddings)[1]
    type_embeddings = tf.gather(self.token_type_embeddings, ops.cast(token_type_ids, "int32"))
    # Without this check a too long sequence fails later with an unhelpful broadcast error.
    tf.debugging.assert_less_equal(
        seq_length, self.max_position_embeddings,
        message=f"{self.name}: sequence longer than max_position_embeddings "
                f"({self.max_position_embeddings})")
    if position_ids is None:
      positions = self.position_embeddings[:seq_length][None, :, :]  # [1, S, H], broadcast
    else:
      positions = tf.gather(self.position_embeddings, ops.cast(position_ids, "int32"))
    x = (ops.cast(word_embeddings, self.compute_dtype)
         + ops.cast(type_embeddings, self.compute_dtype)
         + ops.cast(positions, self.compute_dtype))
    x = self.layer_norm(x)
    x = ops.cast(x, self.compute_dtype)
    return self.dropout(x, training=training)


  def get_config(self):
    config = super().get_config()
    config.update(hidden_size=self.hidden_size, type_vocab_size=self.type_vocab_size,
                  max_position_embeddings=self.max_position_embeddings,
                  hidden_dropout_prob=self.hidden_dropout_prob,
                  initializer_range=self.initializer_range)
    return config


# TokenRows rounds a batch's real-token count up to one of this many steps of its [B * S]
# positions (a step of at least one position), so the per-token kernels see few distinct shapes.
TOKEN_ROW_SHAPES = 32


class TokenRows:
  """The real tokens of unpacked rows as rows of their own: input_mask [B, S] (1 = real) ->
  the flat positions of its T real tokens, and row moves between [B * S, ...] and [T', ...]
  (TransformerBlock's unpadded path). Both moves are row gathers, and each one's gradient is
  the other move: a gathered row comes from one position, so its gradient needs no
  accumulation (tf.gather's own gradient is a segment sum, several times slower here).

  T' is T rounded up to a multiple of max(1, B * S // shapes) (at most B * S): the rows after
  the T real tokens are padding positions, computed and then dropped (scatter leaves them out,
  and no gradient reaches them). Every distinct row count is a new shape for the XLA kernels
  (bert_tf.model.fused) and oneDNN's matmuls, each compiled on first sight, which cost more
  than a training step's whole computation when every batch brought a count of its own; the
  rounding bounds the shapes at `shapes` per [B, S] at the cost of < 1 / shapes more rows."""

  def __init__(self, input_mask, shapes: int = TOKEN_ROW_SHAPES):
    real = tf.reshape(input_mask, [-1]) > 0
    size = tf.size(real)
    count = tf.reduce_sum(tf.cast(real, tf.int32))
    step = tf.maximum(size // shapes, 1)
    rounded = tf.minimum((count + step - 1) // step * step, size)
    # The real positions in order, then as many padding positions as the rounding adds.
    order = tf.concat([tf.where(real)[:, 0], tf.where(tf.logical_not(real))[:, 0]], 0)
    self.positions = tf.cast(order[:rounded], tf.int32)  # [T']
    # 1 for the real tokens' rows, 0 for the added ones: their gradient.
    self.keep = tf.sequence_mask(count, rounded)[:, None]
    # Each flat position's row among the tokens; padding positions read an added zero row.
    self.rows = tf.where(real, tf.cumsum(tf.cast(real, tf.int32)) - 1, rounded)  # [B * S]

  def _gather(self, flat):
    return tf.gather(flat, self.positions)

  def _gather_real(self, flat):
    """_gather with the added rows 0: scatter's gradient (their values reach no output)."""
    return tf.where(self.keep, self._gather(flat), tf.zeros([], flat.dtype))

  def _scatter(self, tokens):
    zero = tf.zeros_like(tokens[:1])
    return tf.gather(tf.concat([tokens, zero], 0), self.rows)

  def gather(self, flat):
    """[B * S, ...] -> [T', ...]: the real positions' rows, then the added padding rows."""
    @tf.custom_gradient
    def move(flat):
      return self._gather(flat), self._scatter
    return move(flat)

  def scatter(self, tokens):
    """[T', ...] -> [B * S, ...]: each real token at its position, zeros at padding."""
    @tf.custom_gradient
    def move(tokens):
      return self._scatter(tokens), self._gather_real
    return move(tokens)


@keras.saving.register_keras_serializable(package="bert_tf")
class SelfAttention(keras.layers.Layer):
  """Multi-head scaled dot-product self-attention (query/key/value projections only).

  Inputs: hidden states [B, S, H] and input_mask [B, S] (1 = real token, 0 = padding), or for
  packed rows the [B, S, S] mask of PackedAttentionMask (1 where a query may see a key).
  Output: the context [B, S, H] before the output projection (which the original scopes under
  attention/output, so it lives in TransformerBlock).
  """

  def __init__(self, hidden_size, num_attention_heads, attention_probs_dropout_prob=0.1,
               initializer_range=0.02, **kwargs):
    super().__init__(**kwargs)
    if hidden_size % num_attention_heads:
      raise ValueError(f"hidden_size ({hidden_size}) is not a multiple of "
                       f"num_attention_heads ({num_attention_heads})")
    self.hidden_size = hidden_size
    self.num_attention_heads = num_attention_heads
    self.attention_probs_dropout_prob = attention_probs_dropout_prob
    self.initializer_range = initializer_range
    self.head_size = hidden_size // num_attention_heads
    dense = lambda name: keras.layers.Dense(
        hidden_size, kernel_initializer=truncated_normal(initializer_range), name=name,
        dtype=self.dtype_policy)
    self.query = dense("query")
    self.key = dense("key")
    self.value = dense("value")
    self.dropout = Dropout(attention_probs_dropout_prob, dtype=self.dtype_policy)

  def build(self, hidden_states_shape, input_mask_shape=None, query_positions_shape=None):
    for layer in (self.query, self.key, self.value):
      layer.build(hidden_states_shape)
    self.built = True

  def _split_heads(self, x, batch, seq):
    # [B, S, H] -> [B, N, S, D]
    x = ops.reshape(x, (batch, seq, self.num_attention_heads, self.head_size))
    return ops.transpose(x, (0, 2, 1, 3))

  def call(self, hidden_states, input_mask, query_positions=None, training=None):
    """Self-attention of hidden_states [B, S, H] over its unpadded positions.

    With query_positions [B, Q] (int), only those positions are queried: the output is
    [B, Q, H], equal to the full output gathered at those positions (keys and values still
    come from all S positions).
    """
    shape = ops.shape(hidden_states)
    batch, seq = shape[0], shape[1]
    queries = hidden_states
    query_seq = seq
    if query_positions is not None:
      queries = tf.gather(hidden_states, ops.cast(query_positions, "int32"), batch_dims=1)
      query_seq = ops.shape(queries)[1]
      if input_mask.shape.rank == 3:  # packed rows: the mask rows of the queried positions
        input_mask = tf.gather(input_mask, ops.cast(query_positions, "int32"), batch_dims=1)
    q = self._split_heads(self.query(queries), batch, query_seq)
    k = self._split_heads(self.key(hidden_states), batch, seq)
    v = self._split_heads(self.value(hidden_states), batch, seq)
    return self._attend(q, k, v, input_mask, training, batch, query_seq)

  def call_unpadded(self, tokens, token_rows, input_mask, queries=None, training=None):
    """The attention of TransformerBlock's unpadded training path: the projections of the real
    tokens only, the attention itself per padded row.

    Args:
      tokens: [T', H] the hidden states of token_rows.positions (the real tokens first).
      token_rows: TokenRows of input_mask.
      input_mask: [B, S] (1 = real token).
      queries: optional [B, Q, H]: query these hidden states only (query_positions' rows).

    Returns:
      The context [T', H] of each of those rows, or [B, Q, H] with queries: the rows of `call`'s
      output at those positions (padding keys weigh 0 either way: their values here are 0,
      the original's are the padding's own, and the -10000 adder zeroes both).
    """
    shape = ops.shape(input_mask)
    batch, seq = shape[0], shape[1]
    padded = lambda x: self._split_heads(token_rows.scatter(x), batch, seq)
    k, v = padded(self.key(tokens)), padded(self.value(tokens))
    if queries is not None:
      query_seq = ops.shape(queries)[1]
      q = self._split_heads(self.query(queries), batch, query_seq)
      return self._attend(q, k, v, input_mask, training, batch, query_seq)
    context = self._attend(padded(self.query(tokens)), k, v, input_mask, training, batch, seq)
    return token_rows.gather(tf.reshape(context, [-1, self.hidden_size]))

  def _attend(self, q, k, v, input_mask, training, batch, query_seq):
    """softmax(q k^T / sqrt(D) + mask adder) v of split heads q [B, N, Q, D], k and v
    [B, N, S, D], with dropout on the probabilities: the context [B, Q, H] (Q = query_seq)."""
    # Scale the query rather than the [B, N, S, S] scores: fewer multiplications, same result.
    q = q * ops.cast(1.0 / math.sqrt(self.head_size), q.dtype)
    scores = tf.matmul(q, k, transpose_b=True)  # [B, N, Q, S] (Q = S without query_positions)
    # Softmax in float32: the -10000 adder and the exponentials overflow float16.
    # [B, S]; or [B, Q, S] for packed rows (PackedAttentionMask: which key each query sees).
    adder = (1.0 - ops.cast(input_mask, "float32")) * MASK_ADDER
    if training and fused.ENABLED and self.attention_probs_dropout_prob > 0:
      probs = fused.attention_probs(scores, adder, self.attention_probs_dropout_prob,
                                    self.dropout.next_seed())
    else:
      scores = ops.cast(scores, "float32") + fused.broadcast_adder(adder)
      probs = ops.cast(ops.softmax(scores, axis=-1), self.compute_dtype)
      probs = self.dropout(probs, training=training)
    context = ops.matmul(probs, v)  # [B, N, Q, D]
    context = ops.transpose(context, (0, 2, 1, 3))
    return ops.reshape(context, (batch, query_seq, self.hidden_size))


  def get_config(self):
    config = super().get_config()
    config.update(hidden_size=self.hidden_size, num_attention_heads=self.num_attention_heads,
                  attention_probs_dropout_prob=self.attention_probs_dropout_prob,
                  initializer_range=self.initializer_range)
    return config


@keras.saving.register_keras_serializable(package="bert_tf")
class TransformerBlock(keras.layers.Layer):
  """One post-LN transformer layer: x = LN(x + Attn(x)); x = LN(x + FFN(x)).

  Inputs: hidden states [B, S, H] and input_mask [B, S]. Output: [B, S, H].
  """

  def __init__(self, hidden_size, num_attention_heads, intermediate_size, hidden_act="gelu",
               hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
               initializer_range=0.02, **kwargs):
    super().__init__(**kwargs)
    self.hidden_size = hidden_size
    self.num_attention_heads = num_attention_heads
    self.intermediate_size = intermediate_size
    self.hidden_act = hidden_act
    self.hidden_dropout_prob = hidden_dropout_prob
    self.attention_probs_dropout_prob = attention_probs_dropout_prob
    self.initializer_range = initializer_range
    policy = self.dtype_policy
    init = lambda: truncated_normal(initializer_range)
    self.attention = SelfAttention(hidden_size, num_attention_heads,
                                   attention_probs_dropout_prob, initializer_range,
                                   name="attention", dtype=policy)
    self.attention_output = keras.layers.Dense(
        hidden_size, kernel_initializer=init(), name="attention_output", dtype=policy)
    self.attention_dropout = Dropout(hidden_dropout_prob, dtype=policy)
    self.attention_layer_norm = layer_norm("attention_LayerNorm", policy)
    # The activation is applied in call(), not passed to Dense, so that names like "gelu" keep
    # the original's meaning (Keras' own "gelu" string is the exact form).
    self.intermediate = keras.layers.Dense(
        intermediate_size, kernel_initializer=init(), name="intermediate", dtype=policy)
    get_activation(hidden_act)  # fails early on an unknown name
    self.output_dense = keras.layers.Dense(
        hidden_size, kernel_initializer=init(), name="output_dense", dtype=policy)
    self.output_dropout = Dropout(hidden_dropout_prob, dtype=policy)
    self.output_layer_norm = layer_norm("output_LayerNorm", policy)

  def build(self, hidden_states_shape, input_mask_shape=None, query_positions_shape=None):
    input_shape = hidden_states_shape
    self.attention.build(input_shape, input_mask_shape)
    self.attention_output.build(input_shape)
    self.attention_layer_norm.build(input_shape)
    self.intermediate.build(input_shape)
    self.output_dense.build(tuple(input_shape[:-1]) + (self.intermediate_size,))
    self.output_layer_norm.build(input_shape)
    self.built = True

  def call(self, hidden_states, input_mask, query_positions=None, training=None,
           unpadded=False):
    """[B, S, H] -> [B, S, H]; with query_positions [B, Q], only those rows: [B, Q, H].

    A layer's output at a position depends on the other positions only through attention's
    keys and values, so the last layer of a pretraining model need not compute the rows no
    head reads (heads.build_pretraining_model(prune_last_layer=True)).

    unpadded (training only, input_mask [B, S] of 0 and 1; other calls ignore it): every
    per-token sublayer (projections, feed-forward, dropout, LayerNorm) computes the real
    tokens alone, only the attention runs per padded row (_call_unpadded). The real
    positions' outputs are the padded computation's (to float rounding; the dropout masks
    are drawn over other shapes); the padding positions' outputs are 0, where the padded
    computation gives values nothing reads but the next layer's masked keys.
    """
    if unpadded and training and input_mask.shape.rank == 2:
      return self._call_unpadded(hidden_states, input_mask, query_positions, training)
    context = self.attention(hidden_states, input_mask, query_positions, training=training)
    residual = hidden_states
    if query_positions is not None:
      residual = tf.gather(hidden_states, ops.cast(query_positions, "int32"), batch_dims=1)
    return self._feed_forward(context, residual, training)

  def _feed_forward(self, context, residual, training):
    """The sublayers after attention: output projection, dropout, residual and LayerNorm,
    then the feed-forward block, on [..., H] rows."""
    x = self._dropout_add_norm(self.attention_output(context), residual,
                               self.attention_dropout, self.attention_layer_norm, training)
    y = get_activation(self.hidden_act, training)(self.intermediate(x))  # [..., I]
    return self._dropout_add_norm(self.output_dense(y), x, self.output_dropout,
                                  self.output_layer_norm, training)

  def _call_unpadded(self, hidden_states, input_mask, query_positions, training):
    """call(unpadded=True): the real tokens gathered to [T', H] rows (TokenRows), the attention's
    keys and values scattered back to [B, S] rows (SelfAttention.call_unpadded), the output
    scattered to [B, S, H] (zeros at padding), or [B, Q, H] at query_positions."""
    shape = ops.shape(hidden_states)
    batch, seq = shape[0], shape[1]
    flat = tf.reshape(hidden_states, [-1, self.hidden_size])
    token_rows = TokenRows(input_mask)
    tokens = token_rows.gather(flat)  # [T', H]
    if query_positions is not None:
      # The queried rows, [B * Q]: row b's position p is flat row b * S + p.
      rows = tf.reshape(ops.cast(query_positions, "int32")
                        + tf.range(batch, dtype=tf.int32)[:, None] * seq, [-1])
      queries = tf.reshape(tf.gather(flat, rows), [batch, -1, self.hidden_size])
      context = self.attention.call_unpadded(tokens, token_rows, input_mask, queries,
                                             training=training)
      return self._feed_forward(context, queries, training)
    context = self.attention.call_unpadded(tokens, token_rows, input_mask,
                                           training=training)
    out = token_rows.scatter(self._feed_forward(context, tokens, training))
    return tf.reshape(out, [batch, seq, self.hidden_size])

  def _dropout_add_norm(self, x, residual, dropout, norm, training):
    """LayerNorm(dropout(x) + residual) in the compute dtype (fused when training)."""
    if training and fused.ENABLED and dropout.rate > 0:
      y = fused.dropout_add_layer_norm(
          x, residual, tf.convert_to_tensor(norm.gamma), tf.convert_to_tensor(norm.beta),
          dropout.rate, dropout.next_seed(), norm.epsilon)
    else:
      y = norm(dropout(x, training=training) + residual)
    return ops.cast(y, self.compute_dtype)


  def get_config(self):
    config = super().get_config()
    config.update(hidden_size=self.hidden_size, num_attention_heads=self.num_attention_heads,
                  intermediate_size=self.intermediate_size, hidden_act=self.hidden_act,
                  hidden_dropout_prob=self.hidden_dropout_prob,
                  attention_probs_dropout_prob=self.attention_probs_dropout_prob,
                  initializer_range=self.initializer_range)
    return config


@keras.saving.register_keras_serializable(package="bert_tf")
class Pooler(keras.layers.Layer):
  """Dense + tanh on the first ([CLS]) token: [B, S, H] -> [B, H] (per example of packed rows:
  see call)."""

  def __init__(self, hidden_size, initializer_range=0.02, **kwargs):
    super().__init__(**kwargs)
    self.hidden_size = hidden_size
    self.initializer_range = initializer_range
    self.dense = keras.layers.Dense(
        hidden_size, activation="tanh", kernel_initializer=truncated_normal(initializer_range),
        name="dense", dtype=self.dtype_policy)

  def build(self, sequence_output_shape, cls_positions_shape=None):
    self.dense.build((sequence_output_shape[0], sequence_output_shape[-1]))
    self.built = True

  def call(self, sequence_output, cls_positions=None, gathered=False):
    """[B, S, H] -> [B, H] from position 0. Packed rows: with cls_positions [R, K], each
    slot's [CLS] -> [R * K, H] (slot order); gathered=True: the first K rows of
    sequence_output are already those (a pruned last layer's)."""
    if cls_positions is None:
      return self.dense(sequence_output[:, 0, :])
    if gathered:
      cls = sequence_output[:, :tf.shape(cls_positions)[1], :]
    else:
      cls = tf.gather(sequence_output, ops.cast(cls_positions, "int32"), batch_dims=1)
    return self.dense(tf.reshape(cls, [-1, self.hidden_size]))


  def get_config(self):
    config = super().get_config()
    config.update(hidden_size=self.hidden_size, initializer_range=self.initializer_range)
    return config


@keras.saving.register_keras_serializable(package="bert_tf")
class PackedAttentionMask(keras.layers.Layer):
  """[B, S] example slots of packed rows (1..K, 0 = padding) -> the [B, S, S] attention mask.

  A real token (query) sees the keys of its own example only. A padding query sees every real
  key, as it does in an unpacked row, so its softmax is never over keys that are all masked
  (finite values, no NaN) and an unpacked row (slots 0 and 1) gets the original's mask.
  """

  def call(self, example_slots):
    slots = ops.cast(example_slots, "int32")
    query, key = slots[:, :, None], slots[:, None, :]
    visible = (key != 0) & ((query == key) | (query == 0))
    return ops.cast(visible, "int32")


# === Head layers (heads.build_pretraining_model) ===
@keras.saving.register_keras_serializable(package="bert_tf")
class MaskedLMTransform(keras.layers.Layer):
  """Gathers the masked positions and applies dense + activation + LayerNorm.

  Inputs: sequence_output [B, S, H], masked_lm_positions [B, P]. Output: [B, P, H].
  The projection to the vocabulary (tied to the word embeddings) and the output bias follow in
  WordEmbedding(reverse=True) and OutputBias.
  """

  def __init__(self, hidden_size, hidden_act="gelu", initializer_range=0.02, **kwargs):
    super().__init__(**kwargs)
    self.hidden_size = hidden_size
    self.hidden_act = hidden_act
    self.initializer_range = initializer_range
    self.dense = keras.layers.Dense(
        hidden_size, kernel_initializer=truncated_normal(initializer_range),
        name="dense", dtype=self.dtype_policy)
    get_activation(hidden_act)  # fails early on an unknown name
    self.layer_norm = layer_norm("LayerNorm", self.dtype_policy)

  def build(self, sequence_output_shape, masked_lm_positions_shape=None):
    self.dense.build((None, None, self.hidden_size))
    self.layer_norm.build((None, None, self.hidden_size))
    self.built = True

  def call(self, sequence_output, masked_lm_positions=None, training=None):
    # Only the P gathered positions reach the [H, V] matmul: the vocabulary projection of all
    # S positions would cost S / P times more. Without positions the input is already
    # gathered ([B, P, H], from a pruned last layer).
    x = sequence_output
    if masked_lm_positions is not None:
      x = tf.gather(sequence_output, ops.cast(masked_lm_positions, "int32"), batch_dims=1)
    x = get_activation(self.hidden_act, training)(self.dense(x))
    return ops.cast(self.layer_norm(x), self.compute_dtype)

  def get_config(self):
    config = super().get_config()
    config.update(hidden_size=self.hidden_size, hidden_act=self.hidden_act,
                  initializer_range=self.initializer_range)
    return config


@keras.saving.register_keras_serializable(package="bert_tf")
class OutputBias(keras.layers.Layer):
  """Adds a learned bias [units] (zeros at init) to the last axis, in the layer's dtype.

  Used as the masked LM output bias (cls/predictions/output_bias) with a float32 policy so that
  the logits handed to the loss are float32 under mixed precision.
  """

  def __init__(self, units, **kwargs):
    super().__init__(**kwargs)
    self.units = units

  def build(self, input_shape):
    self.bias = self.add_weight(name="bias", shape=(self.units,), initializer="zeros")
    self.built = True

  def call(self, inputs):
    return ops.cast(inputs, self.compute_dtype) + ops.cast(self.bias, self.compute_dtype)

  def get_config(self):
    config = super().get_config()
    config.update(units=self.units)
    return config
