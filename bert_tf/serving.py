"""SavedModels for TensorFlow Serving: raw text in, embeddings / fill-mask / next sentence out.

`export_serving_models(...)` writes three models in the versioned layout TF Serving watches
(`<export_dir>/<name>/<version>/`, the highest integer version is served):

  <model_name>_encoder       token ids in, TF Hub BERT encoder conventions. Signature
                             serving_default: int32 input_word_ids, input_mask, input_type_ids
                             [B, S] (B and S dynamic) -> float32 pooled_output [B, H],
                             sequence_output [B, S, H], encoder_outputs [B, L, S, H] (layer axis
                             second, because TF Serving's row format needs the batch first).
  <model_name>_preprocessor  raw strings in, the encoder's three inputs out, tokenized in-graph
                             with the same ids as bert_tf.tokenization.FullTokenizer.
                               serving_default: text [B] -> packed to the export's seq_length.
                               preprocess: text, text_b, seq_length [B] -> each row packed to its
                                 own seq_length and padded to the batch's largest (an empty
                                 text_b means a single segment, as in the original).
  <model_name>               the text model users deploy:
                               serving_default: text [B] -> pooled_output, sequence_output,
                                 input_mask, tokens (the WordPiece token of every position).
                               encode: text, text_b, seq_length [B] -> the same outputs.
                               fill_mask: text [B] holding "[MASK]" -> per mask the top-k tokens
                                 and probabilities (rows without [MASK]: mask_count 0, padding).
                               next_sentence: text, text_b [B] -> probabilities [B, 2] of
                                 (IsNext, NotNext), the original's label order.
                             fill_mask and next_sentence need the checkpoint's pretraining heads;
                             an encoder-only checkpoint gets serving_default and encode only.

Every version directory holds the vocab as a SavedModel asset (assets/vocab.txt, read by the
graph's id -> token table), bert_config.json and data_metadata.json (when known) beside it in
assets/, and warm-up requests in assets.extra/tf_serving_warmup_requests.

Packing follows the original run_classifier.py: [CLS] A [SEP] for one text, [CLS] A [SEP] B [SEP]
for two; a pair over the budget (seq_length - 3) loses tokens from the end of the longer segment
one at a time (B when they tie), a single text keeps its first seq_length - 2 tokens. Invalid
UTF-8 bytes are dropped (like the original's decode("utf-8", "ignore")), never an error.

Every op in the exports is a core TensorFlow op or a tensorflow-text op (tests check this), so
the stock tensorflow/serving binary, which links tensorflow-text's ops, serves them; loading them
in Python needs `import tensorflow_text` and nothing of bert_tf.
"""

import json
import os
import re
import shutil
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Sequence

from absl import flags
from absl import logging
import keras
import numpy as np
import tensorflow as tf

from bert_tf import checkpoints
from bert_tf.config import BertConfig
from bert_tf.encoder import build_encoder
from bert_tf.heads import build_pretraining_model
from bert_tf.text import InGraphTokenizer

DEFAULT_SEQ_LENGTH = 128
DEFAULT_TOP_K = 5
MASK_TOKEN = "[MASK]"
WARMUP_FILE = "tf_serving_warmup_requests"
# Texts of the warm-up requests: one short and one long enough to fill most of a sequence, so
# the first real requests of either kind find the kernels and buffers already made.
WARMUP_TEXTS = ("The man went to the store.",
                "He bought a gallon of milk, " * 12)


# === Packing (in-graph) ===
# Shape legend: B = batch, S = padded sequence length, (n) = ragged dimension.


def truncated_lengths(len_a: tf.Tensor, len_b: tf.Tensor, seq_length: tf.Tensor):
  """Segment lengths after the original's truncation, per row.

  For a pair the original pops the last token of the longer segment (B on a tie) until
  len_a + len_b <= seq_length - 3. The loop's result in closed form: A keeps
  min(len_a, max(budget - len_b, ceil(budget / 2))) tokens and B the rest of the budget. A row
  whose len_b is 0 is a single segment with budget seq_length - 2.

  Args:
    len_a, len_b, seq_length: int32 [B].

  Returns:
    (kept_a, kept_b), int32 [B].
  """
  has_b = len_b > 0
  budget = seq_length - 2 - tf.cast(has_b, tf.int32)
  pair_a = tf.minimum(len_a, tf.maximum(budget - len_b, (budget + 1) // 2))
  kept_a = tf.where(has_b, pair_a, tf.minimum(len_a, budget))
  kept_b = tf.minimum(len_b, budget - kept_a)
  return kept_a, kept_b


def _keep_first(ids: tf.RaggedTensor, lengths: tf.Tensor) -> tf.RaggedTensor:
  """The first `lengths[i]` ids of each row i."""
  positions = tf.ragged.range(ids.row_lengths())
  return tf.ragged.boolean_mask(ids, positions < tf.expand_dims(tf.cast(lengths, tf.int64), 1))


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
               name: Optional[str] = None):
    """Builds the packer.

    Args:
      vocab_file: the WordPiece vocab (id = line number); any tf.io.gfile path.
      do_lower_case: lower-case and strip accents, like the original's flag.
      max_seq_length: the largest seq_length accepted (the model's max_position_embeddings).
      name: module name.
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
           seq_length: tf.Tensor, pad_to: Optional[int] = None) -> Dict[str, tf.Tensor]:
    """Truncates and packs ids into [CLS] A [SEP] (B [SEP]), padded.

    Args:
      ids_a: int32 [B, (n)], the first segments.
      ids_b: int32 [B, (m)] or None; an empty row means no second segment.
      seq_length: int32 [B], the packed length of each row (at least 2, or 3 with a B).
      pad_to: a Python int to pad to (gives a static shape), or None for max(seq_length).

    Returns:
      dict of int32 [B, S]: input_word_ids, input_mask, input_type_ids.
    """
    rows = tf.shape(ids_a.row_splits, out_type=tf.int32)[0] - 1
    len_a = tf.cast(ids_a.row_lengths(), tf.int32)
    if ids_b is None:
      ids_b = tf.RaggedTensor.from_row_lengths(tf.zeros([0], tf.int32),
                                               tf.zeros([rows], tf.int64))
    len_b = tf.cast(ids_b.row_lengths(), tf.int32)
    has_b = len_b > 0
    checks = [
        tf.debugging.assert_less_equal(
            seq_length, self.max_seq_length,
            message=f"seq_length must be at most {self.max_seq_length} (the model's "
                    "max_position_embeddings)"),
        tf.debugging.assert_greater_equal(
            seq_length, 2 + tf.cast(has_b, tf.int32),
            message="seq_length must be at least 2 (3 for a text pair): [CLS] and [SEP] "
                    "need room"),
    ]
    with tf.control_dependencies(checks):
      kept_a, kept_b = truncated_lengths(len_a, len_b, seq_length)
    # Like the original, a B truncated to nothing gets no [SEP] of its own.
    ids = tf.concat([_column(self.cls_id, rows), _keep_first(ids_a, kept_a),
                     _column(self.sep_id, rows), _keep_first(ids_b, kept_b),
                     _column(self.sep_id, rows, kept_b > 0)], axis=1)
    first = tf.ragged.range(ids.row_lengths()) >= tf.expand_dims(tf.cast(kept_a + 2, tf.int64), 1)
    type_ids = tf.cast(first, tf.int32)
    if pad_to is None:
      width = tf.reduce_max(tf.concat([seq_length, [0]], axis=0))
    else:
      width = pad_to
    shape = tf.stack([rows, width]) if pad_to is None else [None, pad_to]
    return dict(
        input_word_ids=ids.to_tensor(default_value=self.pad_id, shape=shape),
        input_mask=tf.ones_like(ids).to_tensor(default_value=0, shape=shape),
        input_type_ids=type_ids.to_tensor(default_value=0, shape=shape))


# === The exported modules ===

_STRINGS = tf.TensorSpec([None], tf.string)
_LENGTHS = tf.TensorSpec([None], tf.int32)


def _seq_length_vector(text: tf.Tensor, seq_length: int) -> tf.Tensor:
  return tf.fill(tf.shape(text, out_type=tf.int32)[:1], seq_length)


_PRETRAINING_NAMES = dict(input_word_ids="input_ids", input_mask="input_mask",
                          input_type_ids="segment_ids")


def call_encoder(encoder: keras.Model, inputs: Mapping[str, tf.Tensor]):
  """Runs the encoder on TF Hub-named inputs, whichever input names it was built with."""
  if "input_ids" in encoder.input:
    inputs = {_PRETRAINING_NAMES[key]: value for key, value in inputs.items()}
  return encoder(dict(inputs), training=False)


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
    return dict(input_ids=inputs["input_word_ids"], input_mask=inputs["input_mask"],
                segment_ids=inputs["input_type_ids"], masked_lm_positions=positions)

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


# === Weights ===


def read_weights(checkpoint: str, config: BertConfig) -> Dict[str, np.ndarray]:
  """Weights under the original TF1 names from any checkpoint the project reads.

  Args:
    checkpoint: one of our training checkpoints (file prefix or directory), an original TF1
      checkpoint, a Model Garden checkpoint, Hugging Face safetensors or a .keras model.
    config: the model's config (needed to restore our object-based checkpoints).

  Returns:
    name -> array; names under cls/ are present when the checkpoint has pretraining heads.
  """
  path = checkpoint
  if tf.io.gfile.isdir(path):
    latest = tf.train.latest_checkpoint(path)
    if latest is None:
      raise FileNotFoundError(f"checkpoint directory {path} holds no checkpoint")
    path = latest
  if checkpoints.is_training_checkpoint(path):
    return checkpoints.read_training_checkpoint(path, config)
  kind = checkpoints.detect_format(path)
  if kind == "tf1":
    values = checkpoints.read_tf1_checkpoint(path)
  elif kind == "model_garden":
    values = checkpoints.read_model_garden_checkpoint(path)
  elif kind == "hf":
    values = checkpoints.read_hf_safetensors(path)
  else:
    values = checkpoints.get_original_weights(keras.models.load_model(path))
  return {name: value for name, value in values.items() if checkpoints.is_weight_name(name)}


def _float32_models(config: BertConfig, weights: Mapping[str, np.ndarray]):
  """(encoder, pretraining model or None) in float32 holding `weights`; one set of variables.

  Call the encoder through `call_encoder`: when it is a view of the pretraining model its inputs
  keep the pretraining names (input_ids, segment_ids).

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
          inputs={key: inputs[key] for key in ("input_ids", "input_mask", "segment_ids")},
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


# === Warm-up records ===
# TF Serving replays assets.extra/tf_serving_warmup_requests (a TFRecord file of PredictionLog
# protos) when it loads a version. tensorflow-serving-api, which defines those protos, pins a
# TensorFlow version (2.21 for its newest release), so the records are encoded here directly from
# the field numbers of tensorflow_serving/apis/{prediction_log,predict,model}.proto:
#   PredictionLog.predict_log = 6; PredictLog.request = 1;
#   PredictRequest.model_spec = 1, PredictRequest.inputs = 2 (map<string, TensorProto>);
#   ModelSpec.name = 1, ModelSpec.signature_name = 3; a map entry is {key = 1, value = 2}.


def _varint(value: int) -> bytes:
  out = bytearray()
  while True:
    byte = value & 0x7F
    value >>= 7
    if value:
      out.append(byte | 0x80)
    else:
      out.append(byte)
      return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
  """A length-delimited protobuf field."""
  return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def prediction_log(model_name: str, signature_name: str,
                   inputs: Mapping[str, np.ndarray]) -> bytes:
  """A serialized tensorflow.serving.PredictionLog holding one PredictRequest."""
  spec = _field(1, model_name.encode("utf-8")) + _field(3, signature_name.encode("utf-8"))
  request = _field(1, spec)
  for key in sorted(inputs):
    tensor = tf.make_tensor_proto(inputs[key]).SerializeToString(deterministic=True)
    request += _field(2, _field(1, key.encode("utf-8")) + _field(2, tensor))
  return _field(6, _field(1, request))


def _warmup_inputs(signature_name: str, seq_length: int, texts: Sequence[str]
                   ) -> Dict[str, np.ndarray]:
  text = np.array([t.encode("utf-8") for t in texts], dtype=object)
  if signature_name == "fill_mask":
    text = np.array([t.replace("milk", MASK_TOKEN, 1).encode("utf-8") for t in texts],
                    dtype=object)
  if signature_name in ("serving_default", "fill_mask"):
    return dict(text=text)
  if signature_name == "next_sentence":
    return dict(text=text, text_b=text[::-1].copy())
  return dict(text=text, text_b=text[::-1].copy(),
              seq_length=np.full([len(texts)], seq_length, np.int32))


def _write_warmup(path: str, model_name: str, requests: Sequence[tuple]) -> None:
  with tf.io.TFRecordWriter(path) as writer:
    for signature_name, inputs in requests:
      writer.write(prediction_log(model_name, signature_name, inputs))


# === Writing ===


def next_version(model_dir: str) -> int:
  """1 + the largest integer version under model_dir (1 when there is none)."""
  if not tf.io.gfile.isdir(model_dir):
    return 1
  versions = [int(n.rstrip("/")) for n in tf.io.gfile.listdir(model_dir)
              if re.fullmatch(r"\d+/?", n)]
  return max(versions, default=0) + 1


def _write_text(path: str, text: str) -> None:
  with tf.io.gfile.GFile(path, "w") as f:
    f.write(text)


def _save_version(module: tf.Module, signatures: Mapping[str, Any], model_dir: str,
                  version: int, extra_files: Mapping[str, str], warmup: Sequence[tuple],
                  model_name: str) -> str:
  """Saves `module` as model_dir/version, written under a temporary name and renamed."""
  final = os.path.join(model_dir, str(version))
  if tf.io.gfile.exists(final):
    raise FileExistsError(f"{final} already exists; TF Serving versions are immutable, so "
                          "choose another --version (or leave it unset for the next one)")
  tmp = os.path.join(model_dir, f".tmp-{version}-{os.getpid()}")
  if tf.io.gfile.exists(tmp):
    tf.io.gfile.rmtree(tmp)
  tf.io.gfile.makedirs(model_dir)
  tf.saved_model.save(module, tmp, signatures=dict(signatures))
  for name, text in extra_files.items():
    _write_text(os.path.join(tmp, "assets", name), text)
  if warmup:
    tf.io.gfile.makedirs(os.path.join(tmp, "assets.extra"))
    _write_warmup(os.path.join(tmp, "assets.extra", WARMUP_FILE), model_name, warmup)
  tf.io.gfile.rename(tmp, final)
  return final


def export_serving_models(config: BertConfig, weights: Mapping[str, np.ndarray],
                          vocab_file: str, export_dir: str, do_lower_case: bool = True,
                          seq_length: int = DEFAULT_SEQ_LENGTH, top_k: int = DEFAULT_TOP_K,
                          version: Optional[int] = None, model_name: str = "bert",
                          data_metadata: Optional[Mapping[str, Any]] = None,
                          warmup: bool = True) -> Dict[str, str]:
  """Writes the encoder, preprocessor and text SavedModels in TF Serving's layout.

  Args:
    config: the model's config.
    weights: name -> array under the original TF1 names (checkpoints.get_original_weights, or
      read_weights); with cls/ names the text model also gets fill_mask and next_sentence.
    vocab_file: the WordPiece vocab the model was trained with.
    export_dir: the model base directory; models go to <export_dir>/<name>/<version>/.
    do_lower_case: the tokenizer's flag (must match training).
    seq_length: the packed length of the serving_default / fill_mask / next_sentence signatures.
    top_k: tokens returned per [MASK] by fill_mask.
    version: the version number; default: one more than the largest already there.
    model_name: the text model's name; the others are <model_name>_encoder and
      <model_name>_preprocessor.
    data_metadata: the training data's metadata, written as assets/data_metadata.json.
    warmup: write assets.extra/tf_serving_warmup_requests.

  Returns:
    {"encoder": path, "preprocessor": path, "text": path} of the version directories written.
  """
  if not 2 <= seq_length <= config.max_position_embeddings:
    raise ValueError(f"seq_length must be in [2, {config.max_position_embeddings}] "
                     f"(max_position_embeddings), got {seq_length}")
  if not 1 <= top_k <= config.vocab_size:
    raise ValueError(f"top_k must be in [1, {config.vocab_size}], got {top_k}")
  if not tf.io.gfile.exists(vocab_file):
    raise FileNotFoundError(f"vocab file not found: {vocab_file}")
  if version is not None and version < 1:
    raise ValueError(f"version must be a positive integer, got {version}")
  # Assets keep their file's base name: a local copy named vocab.txt gives every export the same
  # asset name, whatever the input vocab was called.
  staging = tempfile.mkdtemp(prefix="bert_tf_export_")
  try:
    local_vocab = os.path.join(staging, "vocab.txt")
    tf.io.gfile.copy(vocab_file, local_vocab)
    return _export(config, weights, local_vocab, export_dir, do_lower_case, seq_length, top_k,
                   version, model_name, data_metadata, warmup)
  finally:
    shutil.rmtree(staging, ignore_errors=True)


def _export(config, weights, vocab_file, export_dir, do_lower_case, seq_length, top_k, version,
            model_name, data_metadata, warmup):
  encoder, pretraining = _float32_models(config, weights)
  packer = Packer(vocab_file, do_lower_case, config.max_position_embeddings)
  if packer.tokenizer.vocab_size != config.vocab_size:
    raise ValueError(f"vocab file {vocab_file} has {packer.tokenizer.vocab_size} tokens but "
                     f"the config's vocab_size is {config.vocab_size}")
  export_info = dict(seq_length=seq_length, do_lower_case=bool(do_lower_case), top_k=top_k,
                     model_name=model_name)
  extra = {"bert_config.json": config.to_json_string()}
  if data_metadata is not None:
    extra["data_metadata.json"] = json.dumps(dict(data_metadata), indent=2) + "\n"
  texts = list(WARMUP_TEXTS)
  names = dict(encoder=f"{model_name}_encoder", preprocessor=f"{model_name}_preprocessor",
               text=model_name)
  if version is None:
    version = max(next_version(os.path.join(export_dir, n)) for n in names.values())

  def info(kind, signature_names):
    return json.dumps(dict(export_info, kind=kind, signatures=sorted(signature_names)),
                      indent=2, sort_keys=True) + "\n"

  paths = {}
  # Each module carries the vocab as an asset (the tokenizer's table is built into the graph;
  # the asset is what the id -> token table reads, and what clients can fetch).
  preprocessor = PreprocessorModule(packer, seq_length)
  preprocessor.vocab_file = tf.saved_model.Asset(vocab_file)
  signatures = dict(serving_default=preprocessor.serving_default,
                    preprocess=preprocessor.preprocess)
  warm = [(n, _warmup_inputs(n, seq_length, texts)) for n in signatures]
  paths["preprocessor"] = _save_version(
      preprocessor, signatures, os.path.join(export_dir, names["preprocessor"]), version,
      dict(extra, **{"export_info.json": info("preprocessor", signatures)}), warm if warmup
      else (), names["preprocessor"])

  encoder_module = EncoderModule(encoder)
  encoder_module.vocab_file = tf.saved_model.Asset(vocab_file)
  signatures = dict(serving_default=encoder_module.serving_default)
  sample = preprocessor.serving_default(tf.constant(texts))
  warm = [("serving_default", {k: v.numpy() for k, v in sample.items()})]
  paths["encoder"] = _save_version(
      encoder_module, signatures, os.path.join(export_dir, names["encoder"]), version,
      dict(extra, **{"export_info.json": info("encoder", signatures)}), warm if warmup else (),
      names["encoder"])

  text_module = TextModule(packer, encoder, pretraining, vocab_file, seq_length, top_k)
  signatures = text_module.signature_functions
  warm = [(n, _warmup_inputs(n, seq_length, texts)) for n in signatures]
  paths["text"] = _save_version(
      text_module, signatures, os.path.join(export_dir, names["text"]), version,
      dict(extra, **{"export_info.json": info("text", signatures)}), warm if warmup else (),
      names["text"])
  if pretraining is None:
    logging.warning("The checkpoint has no pretraining heads (cls/...): the text model has no "
                    "fill_mask or next_sentence signature.")
  return paths


# === Command line ===


def define_flags() -> None:
  """Defines the flags of `python -m bert_tf.export` (call once, before app.run(main))."""
  flags.DEFINE_string("bert_config_file", None,
                      "bert_config.json of the model (default: the one beside --checkpoint).")
  flags.DEFINE_string("checkpoint", None,
                      "Weights: one of our training checkpoints (prefix or directory), an "
                      "original TF1 checkpoint, a Model Garden checkpoint, Hugging Face "
                      ".safetensors or a .keras model.")
  flags.DEFINE_string("vocab_file", None, "The WordPiece vocab the model was trained with.")
  flags.DEFINE_string("export_dir", None,
                      "Model base directory: writes <export_dir>/<name>/<version>/ for the "
                      "text model, <name>_encoder and <name>_preprocessor.")
  flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (match training).")
  flags.DEFINE_integer("seq_length", DEFAULT_SEQ_LENGTH,
                       "Packed length of the fixed-length signatures (the 'encode' and "
                       "'preprocess' signatures take a seq_length input instead).")
  flags.DEFINE_integer("top_k", DEFAULT_TOP_K, "Tokens returned per [MASK] by fill_mask.")
  flags.DEFINE_integer("version", None,
                       "Version directory number (default: one more than the largest there).")
  flags.DEFINE_string("model_name", "bert", "Name of the text model directory.")
  flags.DEFINE_string("data_metadata_file", None,
                      "The training data's .metadata.json, copied into the exports.")
  flags.DEFINE_bool("warmup", True, "Write assets.extra/tf_serving_warmup_requests.")
  flags.mark_flags_as_required(["checkpoint", "vocab_file", "export_dir"])


def main(argv):
  """Entry point: flags -> config and weights -> export_serving_models."""
  del argv
  f = flags.FLAGS
  config_file = f.bert_config_file
  if config_file is None:
    base = f.checkpoint.rstrip("/")
    directory = base if tf.io.gfile.isdir(base) else os.path.dirname(base) or "."
    config_file = os.path.join(directory, "bert_config.json")
    if not tf.io.gfile.exists(config_file):
      raise app_error(f"--bert_config_file not given and no bert_config.json beside "
                      f"--checkpoint={f.checkpoint}")
  config = BertConfig.from_json_file(config_file)
  try:
    weights = read_weights(f.checkpoint, config)
  except (FileNotFoundError, ValueError, KeyError, tf.errors.OpError) as e:
    raise app_error(f"--checkpoint={f.checkpoint}: {e}") from None
  metadata = None
  if f.data_metadata_file:
    with tf.io.gfile.GFile(f.data_metadata_file) as fh:
      try:
        metadata = json.loads(fh.read())
      except json.JSONDecodeError as e:
        raise app_error(f"--data_metadata_file={f.data_metadata_file}: not JSON ({e})") from None
  try:
    paths = export_serving_models(
        config, weights, f.vocab_file, f.export_dir, do_lower_case=f.do_lower_case,
        seq_length=f.seq_length, top_k=f.top_k, version=f.version, model_name=f.model_name,
        data_metadata=metadata, warmup=f.warmup)
  except (FileNotFoundError, FileExistsError, ValueError) as e:
    raise app_error(str(e)) from None
  for kind, path in paths.items():
    print(f"{kind}: {path}")


def app_error(message: str) -> Exception:
  from absl import app  # pylint: disable=g-import-not-at-top
  return app.UsageError(message)
