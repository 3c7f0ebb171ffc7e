"""The encoder's forward pass for serving: the same numbers as the Keras model, fewer ops.

A served request pays for every op the graph runs, and at batch 1 a short text's matmuls are
small enough that the Keras layers' bookkeeping (dtype casts, per-projection bias adds, head
reshapes three times over) is a real share of the answer's time. `InferenceEncoder` reads the
weights of any of our Keras models (encoder, pretraining or a task's model: the layers are
named after the original's scopes) and runs the encoder as plain TensorFlow ops:

- the query, key and value projections as one matmul against a fused [H, 3H] kernel, with the
  attention scale 1/sqrt(D) folded into the query's kernel and bias;
- the residual stream, LayerNorm, softmax and every bias in float32;
- the matmuls in the export's `precision`: float32 (the default), or bfloat16 on CPUs whose
  matrix units take it (AMX, AVX-512 BF16), with float32 accumulation of the residual stream
  and the bfloat16 kernels as graph constants (InferenceEncoder._kernels says why);
- packed rows (bert_tf.row_packing's layout: slot ids in input_mask, position ids restarting
  at each example, [CLS] positions per slot) with attention kept within each example, the
  mask of model/layers.py:PackedAttentionMask.

No dropout: it is an inference graph. The Keras model stays the reference (tests hold the two
to float32 round-off) and the one TF Hub's client fine-tunes.

Shape legend: B = rows, S = positions per row, H = hidden size, N = heads, D = head size (H/N),
K = examples per packed row, L = layers.
"""

import math
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import keras
import numpy as np
import tensorflow as tf

from bert_tf import config as config_lib
from bert_tf.model import checkpoints
from bert_tf.model import provenance
from bert_tf.model import encoder as encoder_lib
from bert_tf.model import head_specs
from bert_tf.model import layers

# The matmul precisions an export may choose (--serving_precision).
PRECISIONS = ("float32", "bfloat16")


def _variable(value, dtype, name: str) -> tf.Variable:
  return tf.Variable(tf.cast(value, dtype), trainable=False, name=name)


def _activation(hidden_act: str):
  """The hidden activation as the op that oneDNN fuses into the matmul before it (MatMul,
  BiasAdd, Gelu: measured free, where a separate erfc GELU cost a sixth of a short text's
  answer); other activations as layers.get_activation gives them."""
  function = config_lib.HIDDEN_ACTIVATIONS[hidden_act.lower()].function
  if function in ("gelu_tanh", "gelu_exact"):
    approximate = function == "gelu_tanh"
    return lambda x: tf.nn.gelu(x, approximate=approximate)
  if function == "relu":
    return tf.nn.relu
  return layers.get_activation(hidden_act, training=False)


def _block_count(model: keras.Model) -> int:
  count = 0
  while True:
    try:
      model.get_layer(f"layer_{count}")
    except ValueError:
      return count
    count += 1


# The matmul kernels of a layer, in the order _Block.kernels lists them.
KERNELS = ("qkv_kernel", "output_kernel", "intermediate_kernel", "out_kernel")


class _Block(tf.Module):
  """One transformer layer's weights in the layout the inference graph reads.

  In float32 the kernels are the Keras variables (stored once in a SavedModel); in a reduced
  precision they are arrays of that dtype that InferenceEncoder makes graph constants (see
  InferenceEncoder._kernels).
  """

  def __init__(self, block: layers.TransformerBlock, dtype: tf.DType):
    super().__init__(name=block.name)
    attention = block.attention
    scale = 1.0 / math.sqrt(attention.head_size)
    kernels = [np.asarray(d.kernel.numpy(), np.float32)
               for d in (attention.query, attention.key, attention.value)]
    biases = [np.asarray(d.bias.numpy(), np.float32)
              for d in (attention.query, attention.key, attention.value)]
    kernels[0], biases[0] = kernels[0] * scale, biases[0] * scale
    self.heads = attention.num_attention_heads
    self.head_size = attention.head_size

    def weight(variable, name):
      # The Keras variable itself where the dtypes agree (stored once in the SavedModel).
      return variable.value if dtype == tf.float32 else _variable(variable, dtype, name)

    # The matmul kernels in KERNELS' order.
    sources = [np.concatenate(kernels, axis=1), block.attention_output.kernel,
               block.intermediate.kernel, block.output_dense.kernel]
    if dtype != tf.float32:  # plain arrays, not attributes a tf.Module would track
      self._arrays = {name: np.asarray(tf.cast(value, dtype).numpy())
                      for name, value in zip(KERNELS, sources)}
    else:
      self.qkv_kernel = _variable(sources[0], dtype, "qkv_kernel")
      for name, variable in zip(KERNELS[1:], sources[1:]):
        setattr(self, name, variable.value)
    self.qkv_bias = _variable(np.concatenate(biases), dtype, "qkv_bias")
    self.output_bias = weight(block.attention_output.bias, "output_bias")
    self.attention_norm = (block.attention_layer_norm.gamma.value,
                           block.attention_layer_norm.beta.value)
    self.intermediate_bias = weight(block.intermediate.bias, "intermediate_bias")
    self.out_bias = weight(block.output_dense.bias, "out_bias")
    self.output_norm = (block.output_layer_norm.gamma.value, block.output_layer_norm.beta.value)
    self.epsilon = block.attention_layer_norm.epsilon
    self.activation = _activation(block.hidden_act)

  @property
  def constant_arrays(self) -> Optional[Dict[str, np.ndarray]]:
    """The kernels as arrays (reduced precision), else None (they are variables)."""
    return self.__dict__.get("_arrays")

  def kernels(self) -> Dict[str, tf.Tensor]:
    """The kernels by name (KERNELS) as the variables' values (float32)."""
    return {name: getattr(self, name) for name in KERNELS}


class InferenceEncoder(tf.Module):
  """The encoder of a Keras model of ours as a lean inference graph (see the module docstring).

  Call with the encoder's int32 inputs [B, S] (and, for packed rows, position ids [B, S] and
  [CLS] positions [B, K]); returns float32 sequence_output [B, S, H], pooled_output [B, H]
  ([B * K, H] for packed rows, slot order) and, with all_layers, encoder_outputs (a list of L
  [B, S, H]).
  """

  def __init__(self, model: keras.Model, precision: str = "float32",
               name: str = "inference_encoder"):
    """Reads the weights of `model`'s encoder layers.

    Args:
      model: a Keras model of ours holding layers word_embeddings, embeddings, layer_0..,
        pooler (any of the model tier's builders; float32 weights).
      precision: the matmuls' dtype, one of PRECISIONS.
      name: the module name.
    """
    super().__init__(name=name)
    if precision not in PRECISIONS:
      raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    self.precision = precision
    dtype = tf.as_dtype(precision)
    self.compute_dtype = dtype
    embeddings = model.get_layer("embeddings")
    self.word_embeddings = model.get_layer("word_embeddings").embeddings.value
    self.type_embeddings = embeddings.token_type_embeddings.value
    self.position_embeddings = embeddings.position_embeddings.value
    self.embedding_norm = (embeddings.layer_norm.gamma.value, embeddings.layer_norm.beta.value)
    self.epsilon = embeddings.layer_norm.epsilon
    self.hidden_size = embeddings.hidden_size
    self.max_positions = embeddings.max_position_embeddings
    self.blocks = [_Block(model.get_layer(f"layer_{i}"), dtype)
                   for i in range(_block_count(model))]
    # The models of heads on every position have no pooler: their pooled_output is None.
    names = {layer.name for layer in model.layers}
    self.has_pooler = "pooler" in names
    if self.has_pooler:
      pooler = model.get_layer("pooler").dense
      self.pooler_kernel = pooler.kernel.value
      self.pooler_bias = pooler.bias.value
    arrays = [block.constant_arrays for block in self.blocks]
    if arrays and arrays[0] is not None:
      # One function returning every layer's kernels, however many times the encoder is traced
      # (a serving function traces it once per branch): its constants are stored once.
      self._constant_kernels = tf.function(
          lambda: [{name: tf.constant(a[name]) for name in KERNELS} for a in arrays],
          autograph=False)

  def _kernels(self) -> List[Dict[str, tf.Tensor]]:
    """Every layer's matmul kernels (KERNELS by name).

    In a reduced precision they are graph constants: TensorFlow's oneDNN matmul then keeps
    each kernel in the blocked layout its fastest kernel reads (AMX with bfloat16), reordered
    once, where a variable's kernel is read in plain layout at every call by a slower one
    (bfloat16 matmuls took about half the time at batch 1, measured). In float32 the two ran
    alike, so the kernels stay the Keras variables, stored once. The constants sit in
    saved_model.pb, 2 bytes a weight: BERT-large's 0.6 GB stays under protobuf's 2 GB.
    """
    if "_constant_kernels" in self.__dict__:
      return self._constant_kernels()
    return [block.kernels() for block in self.blocks]

  def _norm(self, x, norm, epsilon):
    mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(variance + epsilon) * norm[0] + norm[1]

  def _dense(self, x, kernel, bias, activation=None, float32=True):
    """x [M, in] -> activation(x @ kernel + bias) [M, out], in the precision: MatMul, BiasAdd
    and the activation in the pattern oneDNN runs as one kernel; cast to float32 unless the
    next matmul reads it (float32=False)."""
    y = tf.nn.bias_add(tf.matmul(tf.cast(x, self.compute_dtype), kernel), bias)
    if activation is not None:
      y = activation(y)
    return tf.cast(y, tf.float32) if float32 else y

  def _attention_adder(self, input_mask, packed: bool) -> tf.Tensor:
    """0 where a query may see a key, -10000 elsewhere: [B, 1, 1, S], or [B, 1, S, S] for
    packed rows (layers.PackedAttentionMask's rule)."""
    if not packed:
      visible = tf.cast(input_mask, tf.float32)[:, tf.newaxis, tf.newaxis, :]
    else:
      query, key = input_mask[:, :, tf.newaxis], input_mask[:, tf.newaxis, :]
      visible = tf.cast((key != 0) & ((query == key) | (query == 0)), tf.float32)
      visible = visible[:, tf.newaxis]
    return (1.0 - visible) * layers.MASK_ADDER

  def _block(self, block: _Block, kernels, x, adder, rows, seq, queries=None):
    """One layer on the residual stream x [B * S, H] float32 (kernels: the layer's, by name);
    with queries [B, Q] (positions) only those rows are computed: [B * Q, H] (keys and values
    still from every position)."""
    heads, size = block.heads, block.head_size
    qkv = self._dense(x, kernels["qkv_kernel"], block.qkv_bias, float32=False)  # [B * S, 3H]
    qkv = tf.reshape(qkv, [rows, seq, 3, heads, size])
    qkv = tf.transpose(qkv, [2, 0, 3, 1, 4])  # [3, B, N, S, D]
    query = qkv[0]
    if queries is not None:
      # The queried rows of the query heads, the residual stream and the mask.
      query = tf.gather(query, queries, axis=2, batch_dims=1)  # [B, N, Q, D]
      x = tf.reshape(tf.gather(tf.reshape(x, [rows, seq, -1]), queries, batch_dims=1),
                     [-1, heads * size])
      if adder.shape[2] != 1:
        adder = tf.gather(adder, queries, axis=2, batch_dims=1)
    scores = tf.matmul(query, qkv[1], transpose_b=True)  # [B, N, Q, S]
    probs = tf.nn.softmax(tf.cast(scores, tf.float32) + adder, axis=-1)
    context = tf.matmul(tf.cast(probs, self.compute_dtype), qkv[2])  # [B, N, Q, D]
    context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [-1, heads * size])
    x = self._norm(self._dense(context, kernels["output_kernel"], block.output_bias) + x,
                   block.attention_norm, block.epsilon)
    hidden = self._dense(x, kernels["intermediate_kernel"], block.intermediate_bias,
                         block.activation, float32=False)
    return self._norm(self._dense(hidden, kernels["out_kernel"], block.out_bias) + x,
                      block.output_norm, block.epsilon)

  def __call__(self, input_word_ids, input_mask, input_type_ids,
               position_ids: Optional[tf.Tensor] = None,
               cls_positions: Optional[tf.Tensor] = None,
               all_layers: bool = False, pooled_only: bool = False) -> Dict[str, object]:
    """The encoder's outputs (see the class docstring).

    pooled_only: return pooled_output alone, the last layer computing only the [CLS] rows
    (what a head on the pooled output reads; heads.pooled_head_model does the same).
    """
    rows, seq = tf.shape(input_word_ids)[0], tf.shape(input_word_ids)[1]
    packed = position_ids is not None
    if packed:
      positions = tf.gather(self.position_embeddings, position_ids)
    else:
      positions = self.position_embeddings[:seq][tf.newaxis]
    x = (tf.gather(self.word_embeddings, input_word_ids)
         + tf.gather(self.type_embeddings, input_type_ids) + positions)
    x = tf.reshape(self._norm(x, self.embedding_norm, self.epsilon), [-1, self.hidden_size])
    adder = self._attention_adder(input_mask, packed)
    if cls_positions is None and not packed:
      cls_positions = tf.zeros([rows, 1], tf.int32)
    outputs: List[tf.Tensor] = []
    last = len(self.blocks) - 1
    for i, (block, kernels) in enumerate(zip(self.blocks, self._kernels())):
      queries = cls_positions if pooled_only and i == last else None
      x = self._block(block, kernels, x, adder, rows, seq, queries)
      if all_layers:
        outputs.append(tf.reshape(x, [rows, seq, self.hidden_size]))
    if pooled_only:  # x holds the [CLS] rows: [B * K, H]
      return dict(pooled_output=self._pool(x))
    sequence = tf.reshape(x, [rows, seq, self.hidden_size])
    pooled = None
    if cls_positions is not None and self.has_pooler:
      first = tf.gather(sequence, cls_positions, batch_dims=1)
      pooled = self._pool(tf.reshape(first, [-1, self.hidden_size]))
    result = dict(sequence_output=sequence, pooled_output=pooled)
    if all_layers:
      result["encoder_outputs"] = outputs
    return result

  def _pool(self, first):
    return tf.tanh(tf.matmul(first, self.pooler_kernel) + self.pooler_bias)


def _serving(kind: Optional[str]) -> Optional[str]:
  """How InferenceModel computes the head `kind`: its HeadSpec.serving (one of
  head_specs.SERVING_MODES), else None (the encoder, or a registered head served as its Keras
  model)."""
  spec = head_specs.spec_of(kind)
  return spec.serving if spec is not None else None


def supports(model: keras.Model) -> bool:
  """Whether `model` is one of the model tier's (its encoder layers named as the original's
  scopes) with a head InferenceModel computes (a registered head says so in its HeadSpec);
  other Keras models on the encoder's inputs (a test's hand-made scorer, say) are served as
  they are."""
  names = {layer.name for layer in model.layers}
  if not {"word_embeddings", "embeddings", "layer_0"} <= names:
    return False
  spec = head_specs.spec_of(checkpoints.model_head(model))
  return spec is None or spec.serving is not None


class InferenceModel(tf.Module):
  """A Keras model of ours as the inference graph, returning what the Keras model returns.

  The model is an encoder (outputs sequence_output, pooled_output, encoder_outputs) or a
  registered head's model, computed as its HeadSpec.serving says: head_specs.POOLED_LOGITS
  (logits [B, C], from the pooled output), POSITION_LOGITS (logits [B, S, C]) or
  START_END_LOGITS (start_logits, end_logits [B, S]); the head's weights are read from its dense
  layer (HeadSpec.weights.layer). Pretraining heads are not served this way.

  PER_EXAMPLE and per_position name the outputs with one row per example and those with one
  per position, which is what unpacking packed rows needs to know.
  """

  def __init__(self, model: keras.Model, precision: str = "float32",
               outputs: Optional[Sequence[str]] = None, name: str = "inference_model"):
    """Reads `model`'s weights (InferenceEncoder) and its head's.

    Args:
      model: a Keras model of ours (see the class docstring), float32 weights.
      precision: one of PRECISIONS.
      outputs: the model's outputs to compute (default all): an encoder's text model needs
        no encoder_outputs.
      name: the module name.
    """
    super().__init__(name=name)
    self.kind = checkpoints.model_head(model)
    if self.kind == provenance.PRETRAINING:
      raise ValueError(f"{model.name}: a pretraining model's heads are not served by "
                       "InferenceModel; pass its encoder")
    self.serving = _serving(self.kind)
    self.pooled = self.serving == head_specs.POOLED_LOGITS
    spec = head_specs.spec_of(self.kind)
    if spec is not None and self.serving is None:
      raise ValueError(f"{model.name}: a {self.kind} head says no way to serve it here; serve "
                       "the Keras model (inference.supports is False for it)")
    self.encoder = InferenceEncoder(model, precision)
    self.output_names = tuple(model.output.keys())
    if outputs is not None:
      unknown = sorted(set(outputs) - set(self.output_names))
      if unknown:
        raise ValueError(f"{model.name} has no output {', '.join(unknown)}")
      self.output_names = tuple(outputs)
    if spec is not None:
      head = model.get_layer(spec.weights.layer)
      self.head_kernel, self.head_bias = head.kernel.value, head.bias.value

  @property
  def per_example(self) -> Tuple[str, ...]:
    """The outputs with one row per example (the rest have one per position)."""
    if self.pooled:
      return ("logits",)
    return ("pooled_output",) if self.kind is None else ()

  def __call__(self, inputs: Mapping[str, tf.Tensor], position_ids=None,
               cls_positions=None) -> Dict[str, object]:
    """inputs: the encoder's three int32 inputs [B, S]; position_ids and cls_positions as
    InferenceEncoder's (packed rows). Returns the Keras model's outputs by name (float32)."""
    ids = [tf.cast(inputs[key], tf.int32) for key in encoder_lib.ENCODER_INPUTS]
    if self.pooled:
      pooled = self.encoder(*ids, position_ids, cls_positions, pooled_only=True)
      return dict(logits=tf.matmul(pooled["pooled_output"], self.head_kernel) + self.head_bias)
    encoded = self.encoder(*ids, position_ids, cls_positions,
                           all_layers="encoder_outputs" in self.output_names)
    if self.kind is None:
      return {key: encoded[key] for key in self.output_names}
    logits = tf.einsum("bsh,hc->bsc", encoded["sequence_output"], self.head_kernel)
    logits = logits + self.head_bias
    if self.serving == head_specs.START_END_LOGITS:
      return dict(start_logits=logits[:, :, 0], end_logits=logits[:, :, 1])
    return dict(logits=logits)
