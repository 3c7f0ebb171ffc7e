"""The tf.Modules behind the exports and the Export each SavedModel is written as.

serving/pretrained.py builds an export of pretrained weights (its float32 models, once) and
hands them here: plain_export wraps a model in a plain SavedModel's module, serving_exports
makes the TF Serving models (preprocessor, encoder and text model) with their assets/ files and
warm-up requests. A fine-tuned model's export (tf_serving.export_task_module) makes its one
module with the model tier's head (a task's signature module is its package's
serving_module.py).
tf_serving.save_exports writes a list of Exports at one version and builds nothing. So an export
runs one way: its entry point (saved_model.export_trained_model,
saved_model.export_serving_models) stages the vocab, pretrained.py checks the settings and builds
(calling down to the model tier and the Packer), this module wraps, tf_serving writes. Nothing
is written before everything is built, so a bad setting fails before any version exists, and no
module is built between two writes.

Shape legend: B = batch, S = padded sequence length, H = hidden size, L = layers, M = [MASK]s
per row, K = top_k, V = vocab size.
"""

import contextlib
import dataclasses
import functools
import json
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from absl import logging
import keras
import numpy as np
import tensorflow as tf

from bert_tf import tokenization
from bert_tf.model.encoder import ENCODER_INPUTS
from bert_tf.model import inference
from bert_tf.model.inference import PRECISIONS
from bert_tf.packing import MASK_TOKEN, Packer
from bert_tf.serving import request_packing


_STRINGS = tf.TensorSpec([None], tf.string)
_LENGTHS = tf.TensorSpec([None], tf.int32)
_IDS = tf.RaggedTensorSpec([None, None], tf.int32, ragged_rank=1)


def signature_function(method, input_signature: Sequence[Any]):
  """tf.function(method) with input_signature, whose graph first checks each dense input's
  shape (EnsureShape): a scalar or rank-2 `text` gets "Shape of tensor text [] is not
  compatible with expected shape [?]" rather than an error from deep inside the tokenizer
  (the declared rank alone lets TF fold away any rank check of its own). The inputs keep
  method's parameter names."""

  @functools.wraps(method)
  def checked(*args):
    args = [tf.nest.map_structure(
        lambda spec, value: (tf.ensure_shape(value, spec.shape)
                             if isinstance(spec, tf.TensorSpec) else value), spec, arg)
            for spec, arg in zip(input_signature, args)]
    return method(*args)

  return tf.function(checked, input_signature=input_signature, autograph=False)


def seq_length_vector(text: tf.Tensor, seq_length: int) -> tf.Tensor:
  """[B] int32 filled with seq_length, one per text (the Packer's budget per row)."""
  return tf.fill(tf.shape(text, out_type=tf.int32)[:1], seq_length)


def call_encoder(encoder: keras.Model, inputs: Mapping[str, tf.Tensor], training: bool = False):
  """Runs the encoder on its three inputs, at any sequence length including 0.

  The pooler reads position 0, which a [B, 0] input lacks; when the length is not known to be
  positive at trace time, the inputs get one masked padding position and the outputs are cut
  back to the input's length, with a zero pooled_output for a length of 0. Inputs of a static
  positive length run the encoder as it is.
  """
  inputs = {key: inputs[key] for key in ENCODER_INPUTS}
  static_width = inputs["input_word_ids"].shape[1]
  if static_width is not None and static_width > 0:
    return encoder(inputs, training=training)
  return with_a_position(lambda values: encoder(values, training=training), inputs)


# What positions cut off by call_cut return: far below any real logit, so they are never
# ranked (the same value as input_pipeline.PADDED_LOGIT in training's predictions).
CUT_LOGIT = -1e9


def call_cut(model: keras.Model, inputs: Mapping[str, tf.Tensor], width_fn, seq_length: int,
             infer=None) -> Mapping[str, tf.Tensor]:
  """The model on [T, seq_length] inputs whose padding is a suffix of every row, computed on
  the inputs cut to width_fn(longest real row, seq_length) (Packer.width: a length bucket) and
  the per-position outputs padded back to seq_length with CUT_LOGIT. The real positions' outputs
  are those of the uncut inputs. width_fn None: the model on the inputs as they are. `infer`
  runs the model without dropout (default model(inputs, training=False); a module passes its
  ReusableModule.infer)."""
  def run(values):
    return model(values, training=False) if infer is None else infer(values)
  if width_fn is None:
    return run(inputs)
  longest = tf.reduce_max(tf.concat([tf.reduce_sum(tf.cast(inputs["input_mask"], tf.int32),
                                                   axis=1), [0]], axis=0))
  width = width_fn(longest, seq_length)
  outputs = run({key: value[:, :width] for key, value in inputs.items()})
  # Per-position outputs: a length axis the model leaves open (its symbolic shape).
  per_position = {key for key, value in model.output.items()
                  if len(value.shape) >= 2 and value.shape[1] is None}
  padded = {}
  for key, value in outputs.items():
    if key in per_position:
      paddings = [[0, 0], [0, seq_length - width]] + [[0, 0]] * (value.shape.rank - 2)
      value = tf.pad(value, paddings, constant_values=tf.cast(CUT_LOGIT, value.dtype))
      value = tf.ensure_shape(value, [None, seq_length] + value.shape[2:].as_list())
    padded[key] = value
  return padded


# === How the signatures run the model ===


@dataclasses.dataclass(frozen=True)
class InferenceOptions:
  """How the raw-text signatures run the model (export's --serving_precision and
  --pack_requests); written to each export's assets/export_info.json.

  precision: the matmuls' dtype (model.inference.PRECISIONS): float32, or bfloat16 for CPUs
    with bfloat16 matrix units (AMX, AVX-512 BF16) and GPUs/TPUs.
  pack_requests: pack a batch's examples several to a row (request_packing).
  """
  precision: str = "float32"
  pack_requests: bool = True

  def __post_init__(self):
    if self.precision not in PRECISIONS:
      raise ValueError(f"--serving_precision must be one of {', '.join(PRECISIONS)}, got "
                       f"{self.precision!r}")

  def info(self) -> Dict[str, Any]:
    return dict(precision=self.precision, pack_requests=bool(self.pack_requests))


_OPTIONS: List[InferenceOptions] = [InferenceOptions()]


@contextlib.contextmanager
def inference_options(options: InferenceOptions):
  """The modules built inside the block run their model as `options` say (like Keras' dtype
  policy scope: the export commands choose, the export functions keep their arguments)."""
  _OPTIONS.append(options)
  try:
    yield options
  finally:
    _OPTIONS.pop()


def current_inference_options() -> InferenceOptions:
  return _OPTIONS[-1]


# === TF Hub's Reusable SavedModel API ===

ENCODER_SPEC = {name: tf.TensorSpec([None, None], tf.int32, name=name) for name in ENCODER_INPUTS}


class ReusableModule(tf.Module):
  """A module that TF Hub's client (hub.KerasLayer, hub.load) can call and fine-tune.

  TF Hub's Reusable SavedModel API asks the saved object for `__call__(inputs, training=False)`
  and three saved attributes: `variables` (everything the call reads, dropout seed states
  included), `trainable_variables` (the weights fine-tuning updates) and
  `regularization_losses` (a list of argument-free functions; empty here, because BERT's weight
  decay lives in its optimizer). tf.Module computes `variables` and `trainable_variables` as
  properties that a SavedModel does not keep, so the class attributes below shadow them and
  `make_reusable` stores the lists on the instance, where saving tracks them.
  """

  variables = ()
  trainable_variables = ()
  regularization_losses = ()

  def make_reusable(self, model: keras.Model, call, input_specs: Sequence[Any]) -> None:
    """Saves `call(inputs, training)` as __call__ for each input structure, and the variables.

    Args:
      model: the Keras model the call runs (its variables become the module's).
      call: (inputs, training) -> outputs; `training` is a Python bool (dropout on when True).
      input_specs: the input structures to trace (TensorSpecs or dicts of them); a restored
        __call__ accepts exactly these, with training=True or False.
    """
    self.variables = _unique(model.variables)
    self.trainable_variables = _unique(model.trainable_variables)
    self.regularization_losses = []
    function = tf.function(lambda inputs, training=False: call(inputs, training),
                           autograph=False)
    for spec in input_specs:
      for training in (False, True):
        function.get_concrete_function(spec, training=training)
    self.__call__ = function

  def make_reusable_on_ids(self, model: keras.Model) -> None:
    """make_reusable for a fine-tuned model on the encoder's three inputs (what the
    bert_preprocessor's bert_pack_inputs gives): __call__ returns its outputs in float32.
    Without dropout it runs self.infer, made here unless set_inference already made it."""
    if "infer" not in self.__dict__:
      self.set_inference(model)
    def call(inputs, training):
      inputs = {key: inputs[key] for key in ENCODER_INPUTS}
      outputs = model(inputs, training=True) if training else self.infer(inputs)
      return {key: tf.cast(value, tf.float32) for key, value in outputs.items()}
    self.make_reusable(model, call, [ENCODER_SPEC])

  def set_inference(self, model: keras.Model, outputs: Optional[Sequence[str]] = None) -> None:
    """self.infer(inputs): `model`'s outputs without dropout on the encoder's three int32
    inputs of any shape, as one function that every entry point without dropout calls (each
    signature, each length bucket, __call__ with training=False), so saving traces it once.

    It runs model.inference.InferenceModel (the lean graph, in the precision of the current
    InferenceOptions) with the batch packed into rows when the options say so and the batch
    has more than one example (request_packing); `outputs` limits what it computes."""
    options = current_inference_options()
    if not inference.supports(model):  # not one of ours: the Keras model as it is
      self.infer = tf.function(lambda inputs: model(inputs, training=False),
                               input_signature=[ENCODER_SPEC], autograph=False)
      return
    self.inference = inference.InferenceModel(model, options.precision, outputs=outputs)
    fast = self.inference

    def infer(inputs):
      return run_inference(fast, inputs, options.pack_requests)

    self.infer = tf.function(infer, input_signature=[ENCODER_SPEC], autograph=False)


def run_inference(model: inference.InferenceModel, inputs: Mapping[str, tf.Tensor],
                  pack: bool) -> Dict[str, Any]:
  """model on inputs [B, S]; with pack, a batch of two or more examples whose padding is a
  suffix of each row (what every packer here makes; ids sent to the encoder export may differ)
  is packed into rows (request_packing.call_packed). Either way per-position logits get
  CUT_LOGIT at padding (input_mask 0) and other per-position outputs 0, so a text's outputs do
  not depend on the batch it came in or on the export's --pack_requests."""
  fill = {key: CUT_LOGIT for key in model.output_names if key.endswith("logits")}
  mask = tf.cast(inputs["input_mask"], tf.int32) > 0

  def unpacked(values):
    return fill_padding(model(values), mask, fill, model.per_example)

  if not pack:
    return unpacked(inputs)
  lengths = tf.reduce_sum(tf.cast(mask, tf.int32), axis=1, keepdims=True)
  suffix_padded = tf.reduce_all(tf.equal(mask, tf.range(tf.shape(mask)[1]) < lengths))
  # The packed path as one call that is never inlined: the tf.cond is lowered to Switch and
  # Merge, and every op of the branch not taken still passes through the executor as a dead op,
  # so a batch of one would step through a whole second encoder graph on each request.
  packed = tf.function(
      lambda values: request_packing.call_packed(
          model, values, model.per_example, fill, max_width=model.encoder.max_positions,
          hidden_size=model.encoder.hidden_size),
      autograph=False, experimental_attributes={"_noinline": True})
  shapes = {}

  def unpacked_branch():
    outputs = unpacked(inputs)
    shapes["outputs"] = tf.nest.map_structure(lambda value: value.shape, outputs)
    return outputs

  merged = tf.cond((tf.shape(mask)[0] > 1) & suffix_padded, lambda: packed(inputs),
                   unpacked_branch)
  # The packed branch is a function call whose output shapes the graph does not record, so the
  # cond's outputs would reach the heads' ops with an unknown rank (and Grappler's cost model
  # would log "Error in PredictCost()" for them on every load): they are stated as the unpacked
  # branch's, which the packed one equals. (Run eagerly, the cond runs one branch and its
  # outputs' shapes are concrete.)
  if tf.executing_eagerly():
    return merged
  return tf.nest.map_structure(tf.ensure_shape, merged, shapes["outputs"])


def fill_padding(outputs: Mapping[str, Any], mask: tf.Tensor, fill: Mapping[str, float],
                 per_example: Sequence[str]) -> Dict[str, Any]:
  """The per-position outputs [B, S, ...] (a list of them: element by element) with fill[name]
  (default 0) where mask [B, S] is False; the names in per_example as they are."""
  return request_packing.map_outputs(
      outputs, per_example, lambda value: value,
      lambda value, key: request_packing.where_real(value, mask, fill.get(key, 0.0)))


def with_a_position(run, inputs: Mapping[str, tf.Tensor]) -> Dict[str, Any]:
  """run(inputs) at any width including 0, as call_encoder: one masked padding position is
  added for the run, per-position outputs are cut back and pooled_output is zero at width 0."""
  width = tf.shape(inputs["input_word_ids"])[1]
  padding = [[0, 0], [0, tf.maximum(1 - width, 0)]]
  outputs = run({key: tf.pad(inputs[key], padding) for key in ENCODER_INPUTS})
  cut = {}
  for key, value in outputs.items():
    if key == "pooled_output":
      cut[key] = tf.where(width > 0, value, tf.zeros_like(value))
    elif isinstance(value, (list, tuple)):
      cut[key] = [layer[:, :width] for layer in value]
    else:
      cut[key] = value[:, :width]
  return cut


def _unique(variables) -> list:
  seen, result = set(), []
  for variable in variables:
    if id(variable) not in seen:
      seen.add(id(variable))
      result.append(variable)
  return result


class EncoderModule(ReusableModule):
  """The encoder with TF Hub's BERT encoder conventions.

  __call__(inputs, training=False): the dict of int32 input_word_ids, input_mask,
  input_type_ids [B, S] -> pooled_output [B, H] (also as "default"), sequence_output [B, S, H],
  encoder_outputs (a list of L [B, S, H]); dropout only with training=True. With the variables
  this makes `hub.KerasLayer(path, trainable=True)` fine-tune the encoder.
  serving_default (TF Serving): the same inputs -> pooled_output, sequence_output,
  encoder_outputs [B, L, S, H].
  """

  def __init__(self, encoder: keras.Model):
    super().__init__(name="bert_encoder")
    self.encoder = encoder
    names = {layer.name for layer in encoder.layers}
    self.max_positions = (int(encoder.get_layer("embeddings").max_position_embeddings)
                          if "embeddings" in names else None)
    self.set_inference(encoder)
    self.make_reusable(encoder, self._call, [ENCODER_SPEC])
    self.serving_default = signature_function(self._serve, [ENCODER_SPEC])

  def _call(self, inputs, training):
    outputs = call_encoder(self.encoder, checked_ids(inputs, self.max_positions), training)
    return dict(pooled_output=outputs["pooled_output"], default=outputs["pooled_output"],
                sequence_output=outputs["sequence_output"],
                encoder_outputs=list(outputs["encoder_outputs"]))

  def _serve(self, inputs):
    outputs = with_a_position(self.infer, checked_ids(inputs, self.max_positions))
    return dict(pooled_output=outputs["pooled_output"],
                sequence_output=outputs["sequence_output"],
                encoder_outputs=tf.stack(outputs["encoder_outputs"], axis=1))


def checked_ids(inputs: Mapping[str, tf.Tensor],
                max_positions: Optional[int]) -> Dict[str, tf.Tensor]:
  """The encoder's three inputs, after asserts that name what a client sent wrong: input_mask
  and input_type_ids of input_word_ids' shape, at most max_positions per row (None: any)."""
  ids = inputs["input_word_ids"]
  checks = [tf.debugging.assert_equal(
      tf.shape(inputs[key]), tf.shape(ids),
      message=f"{key} must have the shape of input_word_ids [batch, seq_length]; the shapes are")
            for key in ENCODER_INPUTS[1:]]
  if max_positions is not None:
    checks.append(tf.debugging.assert_less_equal(
        tf.shape(ids)[-1], max_positions,
        message=f"input_word_ids: at most {max_positions} positions a row (the model's "
                "max_position_embeddings); the row length is"))
  with tf.control_dependencies(checks):
    return {key: tf.identity(inputs[key]) for key in ENCODER_INPUTS}


def _segment_specs() -> list:
  """bert_pack_inputs' traced inputs: one or two segments, [B, (tokens)] or
  [B, (words), (pieces)], int32 or int64 ids."""
  return [[tf.RaggedTensorSpec([None] * (rank + 1), dtype, ragged_rank=rank)] * count
          for dtype in (tf.int32, tf.int64) for rank in (1, 2) for count in (1, 2)]


class PreprocessorModule(tf.Module):
  """Raw text -> encoder inputs, with TF Hub's BERT preprocessor API.

  __call__(text): [B] strings -> input_word_ids, input_mask, input_type_ids int32 [B, S], S the
    batch's longest text rounded up to a length bucket, at most the export's seq_length (what
    hub.KerasLayer calls).
  tokenize(text): [B] strings -> int32 RaggedTensor [B, (words), (pieces)] (the reference
    FullTokenizer's ids, grouped by the BasicTokenizer's words).
  bert_pack_inputs(segments, seq_length=<the export's>): a list of one or two tokenized
    segments ([B, (words), (pieces)] or [B, (tokens)], int32 or int64) -> the three int32
    inputs [B, seq_length]: [CLS] A [SEP] (B [SEP]), truncated as the original (the longer
    segment loses its last token first, B on a tie; a row whose B is empty is a single segment).
  serving_default and preprocess: the TF Serving signatures (see tf_serving).
  """

  def __init__(self, packer: Packer, seq_length: int):
    super().__init__(name="bert_preprocessor")
    self.packer = packer
    self.seq_length = seq_length
    self.serving_default = signature_function(self._serve, [_STRINGS])
    self.preprocess = signature_function(self._preprocess, [_STRINGS, _STRINGS, _LENGTHS])
    self.__call__ = self.serving_default
    self.tokenize = packer.tokenizer.tokenize_words
    # One packing graph (two rank-1 int32 segments; an empty B row is a single segment) that the
    # traced bert_pack_inputs variants call, so the SavedModel holds it once.
    self._pack_pair = tf.function(
        lambda ids_a, ids_b, seq_length: self.packer.pack(
            ids_a, ids_b, tf.fill(tf.shape(ids_a.row_splits, out_type=tf.int32)[:1] - 1,
                                  seq_length), pad_to=seq_length),
        input_signature=[_IDS, _IDS, tf.TensorSpec([], tf.int32)], autograph=False)

    def bert_pack_inputs(segments, seq_length=int(seq_length)):
      return self._pack_segments(segments, seq_length)

    self.bert_pack_inputs = tf.function(bert_pack_inputs, autograph=False)
    for specs in _segment_specs():
      self.bert_pack_inputs.get_concrete_function(specs, tf.TensorSpec([], tf.int32))

  def _serve(self, text):
    return self.packer.pack(self.packer.tokenize(text), None, int(self.seq_length),
                            pad_to=self.seq_length)

  def _preprocess(self, text, text_b, seq_length):
    return self.packer.pack(self.packer.tokenize(text), self.packer.tokenize(text_b), seq_length)

  def _pack_segments(self, segments, seq_length):
    if not isinstance(segments, (list, tuple)) or not 1 <= len(segments) <= 2:
      raise ValueError("bert_pack_inputs takes a list of one or two tokenized segments")
    ids = [tf.cast(s.merge_dims(1, 2) if s.ragged_rank == 2 else s, tf.int32)
           for s in segments]
    if len(ids) == 1:
      rows = tf.shape(ids[0].row_splits, out_type=tf.int64)[:1] - 1
      ids.append(tf.RaggedTensor.from_row_lengths(tf.zeros([0], tf.int32),
                                                  tf.zeros(rows, tf.int64)))
    else:
      ids[1] = ids[1].with_row_splits_dtype(tf.int64)
      check = tf.debugging.assert_equal(
          tf.shape(ids[0].row_splits)[0], tf.shape(ids[1].row_splits)[0],
          message="bert_pack_inputs: the segments must have the same batch size")
      with tf.control_dependencies([check]):
        ids[1] = tf.identity(ids[1])
    return self._pack_pair(ids[0].with_row_splits_dtype(tf.int64), ids[1],
                           tf.cast(seq_length, tf.int32))


class TextModule(ReusableModule):
  """The text model: preprocessing, encoder and (when present) the pretraining heads.

  __call__(text, training=False): [B] strings -> pooled_output (also as "default"),
  sequence_output, input_mask, at the batch's length bucket (at most the export's
  seq_length); with the encoder's variables, so
  hub.KerasLayer(path, trainable=True) is a text-in encoder that fine-tunes.
  """

  def __init__(self, packer: Packer, encoder: keras.Model,
               pretraining: Optional[keras.Model], vocab_file: str, seq_length: int,
               top_k: int):
    super().__init__(name="bert_text")
    self.packer = packer
    self.encoder = encoder
    self.pretraining = pretraining
    self.seq_length = seq_length
    self.top_k = top_k
    # id -> token, the reference load_vocab's tokens (a blank line is the token "", which a
    # TextFileInitializer of the asset would refuse).
    vocab = tokenization.load_vocab(vocab_file)
    self.id_to_token = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            tf.constant(list(vocab.values()), tf.int64), tf.constant(list(vocab), tf.string)),
        default_value="")
    self.set_inference(encoder, outputs=("sequence_output", "pooled_output"))
    # Traced once and called by serving_default and __call__.
    self._pack_single = tf.function(self._pack, input_signature=[_STRINGS], autograph=False)
    self.serving_default = signature_function(self._serve, [_STRINGS])
    self.encode = signature_function(self._encode, [_STRINGS, _STRINGS, _LENGTHS])
    self.make_reusable(encoder, self._call, [_STRINGS])
    self.signature_functions = {"serving_default": self.serving_default, "encode": self.encode}
    if pretraining is not None:
      self.fill_mask = signature_function(self._fill_mask, [_STRINGS])
      self.next_sentence = signature_function(self._next_sentence, [_STRINGS, _STRINGS])
      self.signature_functions.update(fill_mask=self.fill_mask, next_sentence=self.next_sentence)

  def _tokens(self, ids: tf.Tensor) -> tf.Tensor:
    return self.id_to_token.lookup(tf.cast(ids, tf.int64))

  def _embed(self, inputs, positive_width: bool = False):
    """The text model's outputs for packed inputs; positive_width: their width is known to be
    at least 1 (a length bucket or the export's seq_length), so no padding position is added
    for the pooler (with_a_position)."""
    outputs = self.infer(inputs) if positive_width else with_a_position(self.infer, inputs)
    tokens = tf.where(inputs["input_mask"] > 0, self._tokens(inputs["input_word_ids"]), "")
    return dict(pooled_output=outputs["pooled_output"],
                sequence_output=outputs["sequence_output"],
                input_mask=inputs["input_mask"], tokens=tokens)

  def _pack(self, text):
    return self.packer.pack(self.packer.tokenize(text), None, int(self.seq_length),
                            pad_to=self.seq_length)

  def _serve(self, text):
    # Padded to a length bucket or to seq_length: never 0 positions, even for an empty batch.
    return self._embed(self._pack_single(text), positive_width=True)

  def _call(self, text, training):
    inputs = self._pack_single(text)
    outputs = self.encoder({key: inputs[key] for key in ENCODER_INPUTS}, training=training)
    return dict(pooled_output=outputs["pooled_output"], default=outputs["pooled_output"],
                sequence_output=outputs["sequence_output"], input_mask=inputs["input_mask"])

  def _encode(self, text, text_b, seq_length):
    return self._embed(self.packer.pack(self.packer.tokenize(text),
                                        self.packer.tokenize(text_b), seq_length))

  def _pretraining_inputs(self, inputs, positions):
    return dict({key: inputs[key] for key in ENCODER_INPUTS}, masked_lm_positions=positions)

  def _fill_mask(self, text):
    # M = the most [MASK]s in one row of the batch (after truncation), K = top_k.
    inputs = self.packer.pack(self.packer.tokenize_with_masks(text), None, int(self.seq_length),
                              pad_to=self.seq_length)
    ids = inputs["input_word_ids"]
    is_mask = tf.equal(ids, self.packer.mask_id)
    all_positions = tf.broadcast_to(tf.range(tf.shape(ids)[1], dtype=tf.int32), tf.shape(ids))
    positions = tf.ragged.boolean_mask(all_positions, is_mask).to_tensor(default_value=-1)
    valid = positions >= 0  # [B, M]
    logits = self.pretraining(
        self._pretraining_inputs(inputs, tf.maximum(positions, 0)),
        training=False)["masked_lm_logits"]  # [B, M, V]
    probabilities, top_ids = tf.math.top_k(tf.nn.softmax(logits, axis=-1), k=self.top_k)
    valid_k = tf.broadcast_to(tf.expand_dims(valid, -1), tf.shape(top_ids))
    return dict(
        mask_count=tf.reduce_sum(tf.cast(is_mask, tf.int32), axis=1),
        mask_positions=positions,
        top_ids=tf.where(valid_k, top_ids, -1),
        top_tokens=tf.where(valid_k, self._tokens(top_ids), ""),
        top_probabilities=tf.where(valid_k, probabilities, 0.0))

  def _next_sentence(self, text, text_b):
    inputs = self.packer.pack(self.packer.tokenize(text), self.packer.tokenize(text_b),
                              seq_length_vector(text, self.seq_length), pad_to=self.seq_length)
    no_positions = tf.zeros([tf.shape(text)[0], 0], tf.int32)
    logits = self.pretraining(self._pretraining_inputs(inputs, no_positions),
                              training=False)["next_sentence_logits"]
    probabilities = tf.nn.softmax(logits, axis=-1)
    return dict(probabilities=probabilities, is_next_probability=probabilities[:, 0])



# === What an export writes ===

# Texts of the warm-up requests: one short and one long enough to fill most of a sequence, so
# the first real requests of either kind find the kernels and buffers already made.
WARMUP_TEXTS = ("The man went to the store.",
                "He bought a gallon of milk, " * 12)
# The plain SavedModels' folders under an export's base directory (serving/saved_model.py); the
# TF Serving models' are named after ServingSettings.model_name.
PLAIN_ENCODER, PLAIN_PRETRAINING = "encoder", "pretraining"


def text_inputs(texts: Sequence[str], pair: bool) -> Dict[str, np.ndarray]:
  """A warm-up batch: text, and text_b (the texts in reverse order) for pair signatures."""
  text = np.array([t.encode("utf-8") for t in texts], dtype=object)
  return dict(text=text, text_b=text[::-1].copy()) if pair else dict(text=text)


def _warmup_inputs(signature_name: str, seq_length: int) -> Dict[str, np.ndarray]:
  """The warm-up inputs of a raw-text signature of the preprocessor or the text model."""
  if signature_name == "fill_mask":
    return text_inputs([t.replace("milk", MASK_TOKEN, 1) for t in WARMUP_TEXTS], pair=False)
  if signature_name == "serving_default":
    return text_inputs(WARMUP_TEXTS, pair=False)
  inputs = text_inputs(WARMUP_TEXTS, pair=True)
  if signature_name != "next_sentence":
    inputs["seq_length"] = np.full([len(WARMUP_TEXTS)], seq_length, np.int32)
  return inputs


class Export(NamedTuple):
  """One SavedModel of an export, written by tf_serving.save_exports to
  <base directory>/<name>/<version>/.

  kind: what it is (a TF Serving model's "preprocessor", "encoder" or "text"; a plain
    SavedModel's folder name; a fine-tuned model's task).
  name: the model's folder, also the model name of its warm-up requests.
  module, signatures: the tf.Module saved and its signature functions by name.
  files: file name -> text, written to assets/ beside the graph's own assets.
  warmup: the warm-up requests, (signature name, inputs) each; none when empty.
  replace: an existing version is replaced (the plain SavedModels, which a resumed run writes
    again) instead of refused (TF Serving's versions are immutable).
  """
  kind: str
  name: str
  module: tf.Module
  signatures: Mapping[str, Any]
  files: Mapping[str, str]
  warmup: Sequence[Tuple[str, Mapping[str, np.ndarray]]] = ()
  replace: bool = False


@dataclasses.dataclass(frozen=True)
class ServingSettings:
  """How the TF Serving models are made (saved_model.export_serving_models' arguments).

  vocab_file is the local copy named vocab.txt (tf_serving.staged_vocab): each module carries
  it as an asset, so it must exist until the modules are written.
  """
  vocab_file: str
  do_lower_case: bool
  seq_length: int
  top_k: int
  model_name: str
  length_buckets: Optional[str]
  warmup: bool


def plain_export(name: str, model: keras.Model, input_names: Sequence[str],
                  outputs: Sequence[str], files: Mapping[str, str], call=None) -> Export:
  """A plain SavedModel of `model`: its serving signature takes int32 [B, None] `input_names`
  and returns `outputs` of call(model, inputs) (default: model(inputs, training=False))."""
  module = tf.Module()
  module.model = model
  spec = {key: tf.TensorSpec([None, None], tf.int32, name=key) for key in input_names}

  def serve(inputs):
    result = call(model, inputs) if call else model(inputs, training=False)
    return {key: result[key] for key in outputs}

  serve = module.serve = signature_function(serve, [spec])
  return Export(name, name, module, {"serving_default": serve}, files, replace=True)


def serving_exports(packer: Packer, encoder: keras.Model, pretraining: Optional[keras.Model],
                     settings: ServingSettings, files: Mapping[str, str]) -> List[Export]:
  """The TF Serving models (tf_serving.py): preprocessor, encoder and text model.

  Each carries the vocab as an asset (the tokenizer's and the id -> token tables are built into
  the graph; the asset is what clients can fetch), and its settings and signatures in
  assets/export_info.json.
  """
  seq_length, vocab = settings.seq_length, settings.vocab_file
  preprocessor = PreprocessorModule(packer, seq_length)
  preprocessor.vocab_file = tf.saved_model.Asset(vocab)
  encoder_module = EncoderModule(encoder)
  encoder_module.vocab_file = tf.saved_model.Asset(vocab)
  text_module = TextModule(packer, encoder, pretraining, vocab, seq_length, settings.top_k)
  text_module.vocab_file = tf.saved_model.Asset(vocab)
  if pretraining is None:
    logging.warning("The checkpoint has no pretraining heads (cls/...): the text model has no "
                    "fill_mask or next_sentence signature.")

  def text_requests(signatures):
    return [(signature, _warmup_inputs(signature, seq_length)) for signature in signatures]

  def encoder_requests(signatures):
    # What the preprocessor makes of the raw-text requests.
    packed = preprocessor.serving_default(tf.constant(WARMUP_TEXTS))
    return [(signature, {key: value.numpy() for key, value in packed.items()})
            for signature in signatures]

  name = settings.model_name
  built = [("preprocessor", f"{name}_preprocessor", preprocessor,
            dict(serving_default=preprocessor.serving_default,
                 preprocess=preprocessor.preprocess), text_requests),
           ("encoder", f"{name}_encoder", encoder_module,
            dict(serving_default=encoder_module.serving_default), encoder_requests),
           ("text", name, text_module, text_module.signature_functions, text_requests)]
  info = dict(seq_length=seq_length, do_lower_case=bool(settings.do_lower_case),
              top_k=settings.top_k, model_name=name, **current_inference_options().info(),
              length_buckets=None if packer.length_buckets is None else list(packer.length_buckets))
  exports = []
  for kind, folder, module, signatures, requests in built:
    export_info = dict(info, kind=kind, signatures=sorted(signatures))
    own_files = dict(files)
    own_files["export_info.json"] = json.dumps(export_info, indent=2, sort_keys=True) + "\n"
    exports.append(Export(kind, folder, module, signatures, own_files,
                          requests(signatures) if settings.warmup else ()))
  return exports
