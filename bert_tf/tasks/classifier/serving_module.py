"""Raw-text classification (and regression) for TF Serving: the classifier's signature module and
its export.

`ClassifierModule` tokenizes and packs raw texts (a single text, or a pair) in-graph and runs
the fine-tuned classifier (head.py) through the lean inference graph; `export_classifier_model`
writes it in TF Serving's layout through the export every fine-tuned task shares
(serving.tf_serving.export_task_module).
"""

from typing import Any, Mapping, Optional, Sequence

import keras
import tensorflow as tf

from bert_tf import length_buckets as length_buckets_lib
from bert_tf.config import BertConfig
from bert_tf.model.encoder import ENCODER_INPUTS
from bert_tf.packing import Packer
from bert_tf.serving import tf_serving
from bert_tf.serving.modules import (WARMUP_TEXTS, ReusableModule, seq_length_vector,
                                     signature_function, text_inputs)

_STRINGS = tf.TensorSpec([None], tf.string)


class ClassifierModule(ReusableModule):
  """A fine-tuned classifier (or regressor) on raw text: tokenization, packing, the model.

  __call__(inputs, training=False) for TF Hub: inputs is text [B] (single texts) or the dict
    {"text": [B], "text_b": [B]} -> logits [B, C] float32 and probabilities [B, C]
    (regression: logits [B, 1] and score [B]); with the model's variables, so
    hub.KerasLayer(path, trainable=True) goes on fine-tuning it.

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
    self.set_inference(model)
    # Traced once and called by every entry point (tracing the packing is the slow part).
    self._pack_texts = tf.function(self._pack, input_signature=[_STRINGS, _STRINGS],
                                   autograph=False)
    # A single text's packing: the inputs an empty text_b gives, without tokenizing it.
    self._pack_single = tf.function(self._pack_one, input_signature=[_STRINGS], autograph=False)
    self.classify = signature_function(self._classify, [_STRINGS, _STRINGS])
    if pair:
      self.serving_default = signature_function(self._classify, [_STRINGS, _STRINGS])
    else:
      self.serving_default = signature_function(self._serve_single, [_STRINGS])
    self.signature_functions = {"serving_default": self.serving_default,
                                "classify": self.classify}
    self.make_reusable(model, self._call, [_STRINGS, dict(text=_STRINGS, text_b=_STRINGS)])

  def _serve_single(self, text):
    return self._answers(self._run(self._pack_single(text)))

  def _pack(self, text, text_b):
    return self.packer.pack(self.packer.tokenize(text), self.packer.tokenize(text_b),
                            seq_length_vector(text, self.seq_length), pad_to=self.seq_length)

  def _pack_one(self, text):
    return self.packer.pack(self.packer.tokenize(text), None, int(self.seq_length),
                            pad_to=self.seq_length)

  def _logits(self, text, text_b, training=False):
    return self._run(self._pack_texts(text, text_b), training)

  def _run(self, inputs, training=False):
    inputs = {key: inputs[key] for key in ENCODER_INPUTS}
    outputs = self.model(inputs, training=True) if training else self.infer(inputs)
    return tf.cast(outputs["logits"], tf.float32)

  def _call(self, inputs, training):
    if isinstance(inputs, Mapping):
      text, text_b = inputs["text"], inputs["text_b"]
    else:
      text, text_b = inputs, tf.fill(tf.shape(inputs), "")
    logits = self._logits(text, text_b, training)
    if self.regression:
      return dict(logits=logits, score=logits[:, 0])
    return dict(logits=logits, probabilities=tf.nn.softmax(logits, axis=-1))

  def _classify(self, text, text_b):
    return self._answers(self._logits(text, text_b))

  def _answers(self, logits):
    """The signatures' outputs from the logits [B, C]."""
    if self.regression:
      return dict(score=logits[:, 0])
    probabilities = tf.nn.softmax(logits, axis=-1)
    label_id = tf.argmax(logits, axis=-1, output_type=tf.int32)
    rows = tf.shape(logits)[0]
    return dict(label=tf.gather(self.label_names, label_id), label_id=label_id,
                probabilities=probabilities,
                label_names=tf.tile(self.label_names[tf.newaxis], [rows, 1]))


def export_classifier_model(model, config: BertConfig, vocab_file: str, export_dir: str,
                            label_names: Optional[Sequence[str]], pair: bool,
                            do_lower_case: bool = True,
                            seq_length: int = tf_serving.DEFAULT_SEQ_LENGTH,
                            version: Optional[int] = None, model_name: str = "classifier",
                            task_info: Optional[Mapping[str, Any]] = None,
                            warmup: bool = True,
                            length_buckets: Optional[str] = length_buckets_lib.AUTO) -> str:
  """Writes a raw-text classifier SavedModel in TF Serving's layout (ClassifierModule).

  Size: thirteen parameters, the export's settings as run_classifier's flags give them, one each.

  Args:
    model: the trained classifier (head.build_classifier_model) in float32, built
      outside any distribution strategy (so the SavedModel holds plain variables).
    config: its BertConfig.
    vocab_file: the vocab it was fine-tuned with (an asset of the export).
    export_dir: the model base directory; the version goes to <export_dir>/<model_name>/<v>/.
    label_names: the labels in id order; None for a regression model (one score).
    pair: whether serving_default takes text_b (the task had a second text).
    do_lower_case: the tokenizer's casing (as in fine-tuning).
    seq_length: the packed length (the fine-tuning max_seq_length).
    version: default one more than the largest already there.
    model_name: the directory name under export_dir.
    task_info: written as assets/task_info.json (labels, task, casing, vocab checksum).
    warmup: write TF Serving warm-up requests.
    length_buckets: as for saved_model.export_serving_models.

  Returns:
    The version directory written.
  """
  info = dict(kind="classifier", labels=None if label_names is None else list(label_names),
              regression=label_names is None, pair=bool(pair))
  return tf_serving.export_task_module(
      lambda packer: ClassifierModule(packer, model, seq_length, label_names, pair), config,
      vocab_file, export_dir, do_lower_case=do_lower_case, seq_length=seq_length,
      version=version, model_name=model_name, info=info, task_info=task_info,
      warmup_inputs=lambda name: text_inputs(WARMUP_TEXTS, pair=pair or name == "classify"),
      warmup=warmup, length_buckets=length_buckets)
