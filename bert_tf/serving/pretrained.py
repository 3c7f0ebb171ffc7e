"""An export of pretrained weights: its settings checked, its float32 models built once, its
SavedModels made.

`pretraining_exports` is what both entry points of such an export call
(saved_model.export_trained_model: the plain SavedModels and, with a vocab, the TF Serving models;
saved_model.export_serving_models: the TF Serving models alone). It goes down the tiers once and
in order: the settings are checked against the config; the model tier builds one float32 model
and loads the weights into it (float32_models); the Packer is made from the vocab; then
serving/modules.py wraps the models in tf.Modules, each an `Export`. tf_serving.save_exports
writes the list at one version and builds nothing, so nothing is written before everything is
built and a bad setting fails before any version exists.
"""

import json
from typing import Any, List, Mapping, Optional, Tuple

import keras
import numpy as np

from bert_tf import io
from bert_tf import length_buckets as length_buckets_lib
from bert_tf.config import BertConfig
from bert_tf.model import checkpoints
from bert_tf.model import layers
from bert_tf.model.encoder import ENCODER_INPUTS
from bert_tf.model.heads import PRETRAINING_INPUTS, build_pretraining_model
from bert_tf.packing import Packer
from bert_tf.serving import modules


def check_seq_length(seq_length: int, config: BertConfig) -> None:
  """A TF Serving model's packed length must fit the config's position embeddings."""
  if not 2 <= seq_length <= config.max_position_embeddings:
    raise ValueError(f"seq_length must be in [2, {config.max_position_embeddings}] "
                     f"(max_position_embeddings), got {seq_length}")


def float32_models(config: BertConfig, weights: Mapping[str, np.ndarray],
                   source: str = "checkpoint") -> Tuple[keras.Model, Optional[keras.Model]]:
  """(encoder, pretraining model or None) in float32 holding `weights` (named `source` in
  messages); one set of variables, built outside any strategy: every pretraining export's models
  (the plain SavedModels of serving.saved_model and the TF Serving models), built once.

  One model is built, the pretraining model, and the encoder is a view of its graph, so the
  text model stores the encoder weights once. Weights without the heads (no cls/ names: an
  encoder checkpoint) load into its encoder and only the encoder is returned; the heads' unused
  variables are never exported.
  """
  heads = any(name.startswith("cls/") for name in weights)
  with layers.dtype_policy("float32"):
    model = build_pretraining_model(config)
    checkpoints.set_original_weights(model, weights, source=source,
                                     optional=() if heads else ("cls/",))
    inputs = model.input
    encoder = keras.Model(
        inputs={key: inputs[key] for key in ENCODER_INPUTS},
        outputs=dict(
            sequence_output=model.get_layer(f"layer_{config.num_hidden_layers - 1}").output,
            pooled_output=model.get_layer("pooler").output,
            encoder_outputs=[model.get_layer(f"layer_{i}").output
                             for i in range(config.num_hidden_layers)]),
        name="bert_encoder")
  return encoder, model if heads else None


def pretraining_exports(config: BertConfig, weights: Mapping[str, np.ndarray],
                        source: str = "checkpoint", saved_models: bool = True,
                        vocab_file: Optional[str] = None,
                        data_metadata: Optional[Mapping[str, Any]] = None,
                        serving: Optional[modules.ServingSettings] = None) -> List[modules.Export]:
  """Every SavedModel of an export of pretrained weights, from one float32 copy of them.

  Args:
    config: the model's config (assets/bert_config.json of every SavedModel).
    weights: name -> array under the original TF1 names; with cls/ names the text model also
      gets fill_mask and next_sentence (and there is a pretraining model to save).
    source: what the weights came from, named in messages.
    saved_models: the plain SavedModels (serving/saved_model.py): encoder/ and pretraining/.
    vocab_file: copied into the plain SavedModels' assets/vocab.txt when given.
    data_metadata: the training data's metadata, assets/data_metadata.json of every SavedModel.
    serving: the TF Serving models' settings (preprocessor, encoder and text model), or None
      for none. They are checked against the config before anything is built.

  Returns:
    The Exports: the plain SavedModels first, then the TF Serving models.
  """
  if serving:
    check_seq_length(serving.seq_length, config)
    if not 1 <= serving.top_k <= config.vocab_size:
      raise ValueError(f"top_k must be in [1, {config.vocab_size}], got {serving.top_k}")
  encoder, pretraining = float32_models(config, weights, source=source)
  if serving:
    packer = Packer(serving.vocab_file, serving.do_lower_case, config.max_position_embeddings,
                    length_buckets=length_buckets_lib.parse(serving.length_buckets,
                                                            serving.seq_length))
    if packer.tokenizer.vocab_size != config.vocab_size:
      raise ValueError(f"vocab file {serving.vocab_file} has {packer.tokenizer.vocab_size} "
                       f"tokens but the config's vocab_size is {config.vocab_size}")
  files = {"bert_config.json": config.to_json_string()}
  if data_metadata is not None:
    files["data_metadata.json"] = json.dumps(dict(data_metadata), indent=2) + "\n"
  exports = []
  if saved_models:
    plain_files = dict(files)
    if vocab_file:
      plain_files["vocab.txt"] = io.read_text(vocab_file)
    # call_encoder: a sequence length of 0 gives empty outputs, as in the serving exports.
    exports += [modules.plain_export(modules.PLAIN_ENCODER, encoder, ENCODER_INPUTS,
                                     ("sequence_output", "pooled_output"), plain_files,
                                     modules.call_encoder),
                modules.plain_export(modules.PLAIN_PRETRAINING, pretraining, PRETRAINING_INPUTS,
                                     ("masked_lm_logits", "next_sentence_logits"), plain_files)]
  if serving:
    exports += modules.serving_exports(packer, encoder, pretraining, serving, files)
  return exports
