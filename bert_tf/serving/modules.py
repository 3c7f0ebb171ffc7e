"""The tf.Modules behind the exports: encoder, preprocessor and text model signatures.

Shape legend: B = batch, S = padded sequence length, H = hidden size, L = layers, M = [MASK]s
per row, K = top_k, V = vocab size.
"""

from typing import Mapping, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf

from bert_tf.config import BertConfig
from bert_tf.model import checkpoints
from bert_tf.model.encoder import ENCODER_INPUTS, build_encoder
from bert_tf.model.heads import build_pretraining_model
from bert_tf.packing import Packer


_STRINGS = tf.TensorSpec([None], tf.string)
_LENGTHS = tf.TensorSpec([None], tf.int32)


def _seq_length_vector(text: tf.Tensor, seq_length: int) -> tf.Tensor:
  return tf.fill(tf.shape(text, out_type=tf.int32)[:1], seq_length)


def call_encoder(encoder: keras.Model, inputs: Mapping[str, tf.Tensor]):
  """Runs the encoder (inference) on its three inputs."""
  return encoder({key: inputs[key] for key in ENCODER_INPUTS}, training=False)


class EncoderModule(tf.Module):
  """The encoder with TF Hub encoder conventions (callable and a serving signature)."""

  def __init__(self, encoder: keras.Model):
    super().__init__(name="bert_encoder")
    self.encoder = encoder
    spec = {name: tf.TensorSpec([None, None], tf.int32, name=name)
            for name in ("input_word_ids", "input_mask", "input_type_ids")}
    self.__call__ = tf.function(self._call, input_signature=[spec])
    self.serving_default = tf.function(self._serve, input_signature=[spec])

  def _call(self, inputs):
    return call_encoder(self.encoder, inputs)

  def _serve(self, inputs):
    outputs = call_encoder(self.encoder, inputs)
    return dict(pooled_output=outputs["pooled_output"],
                sequence_output=outputs["sequence_output"],
                encoder_outputs=tf.stack(outputs["encoder_outputs"], axis=1))


class PreprocessorModule(tf.Module):
  """Raw text -> encoder inputs."""

  def __init__(self, packer: Packer, seq_length: int):
    super().__init__(name="bert_preprocessor")
    self.packer = packer
    self.seq_length = seq_length
    self.serving_default = tf.function(self._serve, input_signature=[_STRINGS])
    self.preprocess = tf.function(self._preprocess,
                                  input_signature=[_STRINGS, _STRINGS, _LENGTHS])

  def _serve(self, text):
    return self.packer.pack(self.packer.tokenize(text), None,
                            _seq_length_vector(text, self.seq_length), pad_to=self.seq_length)

  def _preprocess(self, text, text_b, seq_length):
    return self.packer.pack(self.packer.tokenize(text), self.packer.tokenize(text_b), seq_length)


class TextModule(tf.Module):
  """The text model: preprocessing, encoder and (when present) the pretraining heads."""

  def __init__(self, packer: Packer, encoder: keras.Model,
               pretraining: Optional[keras.Model], vocab_file: str, seq_length: int,
               top_k: int):
    super().__init__(name="bert_text")
    self.packer = packer
    self.encoder = encoder
    self.pretraining = pretraining
    self.seq_length = seq_length
    self.top_k = top_k
    # id -> token, read from the vocab asset; lines are stripped like the reference load_vocab.
    self.id_to_token = tf.lookup.StaticHashTable(
        tf.lookup.TextFileInitializer(
            vocab_file, tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER,
            tf.string, tf.lookup.TextFileIndex.WHOLE_LINE),
        default_value="")
    self.serving_default = tf.function(self._serve, input_signature=[_STRINGS])
    self.encode = tf.function(self._encode, input_signature=[_STRINGS, _STRINGS, _LENGTHS])
    self.signature_functions = {"serving_default": self.serving_default, "encode": self.encode}
    if pretraining is not None:
      self.fill_mask = tf.function(self._fill_mask, input_signature=[_STRINGS])
      self.next_sentence = tf.function(self._next_sentence,
                                       input_signature=[_STRINGS, _STRINGS])
      self.signature_functions.update(fill_mask=self.fill_mask, next_sentence=self.next_sentence)

  def _tokens(self, ids: tf.Tensor) -> tf.Tensor:
    return tf.strings.strip(self.id_to_token.lookup(tf.cast(ids, tf.int64)))

  def _embed(self, inputs):
    outputs = call_encoder(self.encoder, inputs)
    tokens = tf.where(inputs["input_mask"] > 0, self._tokens(inputs["input_word_ids"]), "")
    return dict(pooled_output=outputs["pooled_output"],
                sequence_output=outputs["sequence_output"],
                input_mask=inputs["input_mask"], tokens=tokens)

  def _serve(self, text):
    return self._embed(self.packer.pack(self.packer.tokenize(text), None,
                                        _seq_length_vector(text, self.seq_length),
                                        pad_to=self.seq_length))

  def _encode(self, text, text_b, seq_length):
    return self._embed(self.packer.pack(self.packer.tokenize(text),
                                        self.packer.tokenize(text_b), seq_length))

  def _pretraining_inputs(self, inputs, positions):
    return dict({key: inputs[key] for key in ENCODER_INPUTS}, masked_lm_positions=positions)

  def _fill_mask(self, text):
    # M = the most [MASK]s in one row of the batch (after truncation), K = top_k.
    inputs = self.packer.pack(self.packer.tokenize_with_masks(text), None,
                              _seq_length_vector(text, self.seq_length), pad_to=self.seq_length)
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
                              _seq_length_vector(text, self.seq_length), pad_to=self.seq_length)
    no_positions = tf.zeros([tf.shape(text)[0], 0], tf.int32)
    logits = self.pretraining(self._pretraining_inputs(inputs, no_positions),
                              training=False)["next_sentence_logits"]
    probabilities = tf.nn.softmax(logits, axis=-1)
    return dict(probabilities=probabilities, is_next_probability=probabilities[:, 0])



class ClassifierModule(tf.Module):
  """A fine-tuned classifier (or regressor) on raw text: tokenization, packing, the model.

  Signatures (B = batch, C = labels):
    serving_default: text [B] (and text_b [B] when the task is a pair task) ->
      classification: label [B] string, label_id [B] int32, probabilities [B, C] float32,
      label_names [B, C] string (the label of each probability column; repeated per row,
      because TF Serving's row format wants the batch first);
      regression: score [B] float32.
    classify: text, text_b [B] -> the same outputs; an empty text_b is a single segment (the
      original's rule), so one signature serves single texts and pairs.
  """

  def __init__(self, packer: Packer, model: keras.Model, seq_length: int,
               label_names: Optional[Sequence[str]], pair: bool):
    super().__init__(name="bert_classifier")
    self.packer = packer
    self.model = model
    self.seq_length = seq_length
    self.regression = label_names is None
    self.label_names = tf.constant(list(label_names or [""]), tf.string)
    self.classify = tf.function(self._classify, input_signature=[_STRINGS, _STRINGS])
    if pair:
      self.serving_default = tf.function(self._classify, input_signature=[_STRINGS, _STRINGS])
    else:
      self.serving_default = tf.function(self._serve_single, input_signature=[_STRINGS])
    self.signature_functions = {"serving_default": self.serving_default,
                                "classify": self.classify}

  def _serve_single(self, text):
    return self._classify(text, tf.fill(tf.shape(text), ""))

  def _classify(self, text, text_b):
    inputs = self.packer.pack(self.packer.tokenize(text), self.packer.tokenize(text_b),
                              _seq_length_vector(text, self.seq_length), pad_to=self.seq_length)
    logits = tf.cast(self.model({key: inputs[key] for key in ENCODER_INPUTS},
                                training=False)["logits"], tf.float32)
    if self.regression:
      return dict(score=logits[:, 0])
    probabilities = tf.nn.softmax(logits, axis=-1)
    label_id = tf.argmax(logits, axis=-1, output_type=tf.int32)
    rows = tf.shape(logits)[0]
    return dict(label=tf.gather(self.label_names, label_id), label_id=label_id,
                probabilities=probabilities,
                label_names=tf.tile(self.label_names[tf.newaxis], [rows, 1]))


def float32_models(config: BertConfig, weights: Mapping[str, np.ndarray]):
  """(encoder, pretraining model or None) in float32 holding `weights`; one set of variables.

  The encoder is a view of the pretraining model's graph when there are heads, so the text model
  stores the encoder weights once.
  """
  previous = keras.config.dtype_policy()
  keras.config.set_dtype_policy("float32")
  try:
    if any(name.startswith("cls/") for name in weights):
      pretraining = build_pretraining_model(config)
      checkpoints.set_original_weights(pretraining, weights, source="checkpoint")
      inputs = pretraining.input
      encoder = keras.Model(
          inputs={key: inputs[key] for key in ENCODER_INPUTS},
          outputs=dict(
              sequence_output=pretraining.get_layer(f"layer_{config.num_hidden_layers - 1}").output,
              pooled_output=pretraining.get_layer("pooler").output,
              encoder_outputs=[pretraining.get_layer(f"layer_{i}").output
                               for i in range(config.num_hidden_layers)]),
          name="bert_encoder")
    else:
      pretraining = None
      encoder = build_encoder(config)
      checkpoints.set_original_weights(encoder, weights, source="checkpoint")
  finally:
    keras.config.set_dtype_policy(previous)
  return encoder, pretraining
