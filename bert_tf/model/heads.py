"""The encoder's own heads, pretraining (masked LM, next sentence): the encoder graph
(encoder.encoder_graph) with layers.py's MaskedLMTransform and OutputBias; and what a task's head
(a registered head, model/head_specs.py, built in its task package) builds on: the model inputs
(model_inputs, packed_args) and pooled_head_model, a dense layer on the pooled output.

build_pretraining_model(config); pooled_head_model(config, outputs, layer_name, dropout_name,
name).

Shape legend: B = batch, S = sequence length, P = masked positions per example
(max_predictions_per_seq), H = hidden size, V = vocab size.
"""


import keras
from keras import ops

from bert_tf import row_packing
from bert_tf.model import layers
from bert_tf.config import BertConfig
from bert_tf.model.encoder import ENCODER_INPUTS, PACKED_INPUTS, encoder_graph, packed_inputs

# Every Keras model here takes TF Hub's input names; the pretraining model adds the positions to
# predict. The TFRecords keep the original's names (input_ids, segment_ids): the input pipeline
# renames them once (training/input_pipeline.py).
PRETRAINING_INPUTS = ENCODER_INPUTS + ("masked_lm_positions",)
# build_pretraining_model(masked_hidden=True)'s extra output.
MASKED_LM_HIDDEN = "masked_lm_hidden"

# === Functional Model ===
def build_pretraining_model(config: BertConfig, name: str = "bert_pretraining",
                            prune_last_layer: bool = False, packed: bool = False,
                            masked_hidden: bool = False) -> keras.Model:
  """The encoder with the masked LM and next sentence heads.

  Args:
    config: the model hyperparameters.
    name: the Keras model name.
    prune_last_layer: compute the last transformer layer only at [CLS] and the masked
      positions, the only rows the heads read. The logits equal the full model's (up to float
      rounding) with about 13% fewer FLOPs per training step for BERT-Mini/Small at sequence
      128 and 20 predictions; run_pretraining uses it. Keep it False for a model whose inner
      layer outputs are read (serving builds an encoder view of the full graph).

    packed: take packed rows (bert_tf.row_packing, input_pipeline.pretraining_dataset with
      packing): the inputs add input_position_ids [R, S] and packed_cls_positions [R, K],
      masked_lm_positions [R, P'] hold every instance's predictions in the row, and
      next_sentence_logits are one row per slot [R * K, 2].
    masked_hidden: also output masked_lm_hidden [B, P, H], the last layer's hidden states at
      the masked positions (what pretraining distillation's cosine loss compares; the same
      rows whether the last layer is pruned or not).

  Returns:
    A functional keras.Model. Inputs (dict of int32): input_word_ids, input_mask,
    input_type_ids [B, S]
    and masked_lm_positions [B, P]. Outputs (dict of float32): masked_lm_logits [B, P, V] and
    next_sentence_logits [B, 2]. Its layer and variable names extend build_encoder's, so the
    encoder weights can be moved between the two by name (model/checkpoints.py).
  """
  inputs = {key: keras.Input(shape=(None,), dtype="int32", name=key)
            for key in PRETRAINING_INPUTS}
  if packed:
    inputs.update(packed_inputs())
  positions = inputs["masked_lm_positions"]
  # The [CLS] rows the pooler reads: position 0, or each slot's [CLS] in packed rows ([R, K]).
  cls_rows = (inputs[PACKED_INPUTS[1]] if packed else ops.zeros_like(positions[:, :1]))
  num_cls = row_packing.MAX_EXAMPLES_PER_ROW if packed else 1
  if prune_last_layer:
    # [B, C + P]: the [CLS] rows for the pooler, then the masked positions.
    rows = ops.concatenate([ops.cast(cls_rows, positions.dtype), positions], axis=1)
    encoded, word_embedding = encoder_graph(config, inputs["input_word_ids"], inputs["input_mask"],
                                            inputs["input_type_ids"], last_layer_positions=rows,
                                            **packed_args(inputs))
    masked = encoded["sequence_output"][:, num_cls:, :]  # already at the masked positions
  else:
    encoded, word_embedding = encoder_graph(config, inputs["input_word_ids"], inputs["input_mask"],
                                            inputs["input_type_ids"], **packed_args(inputs))
    masked = None
  hidden = None
  if masked_hidden:
    hidden = (masked if masked is not None else
              ops.take_along_axis(encoded["sequence_output"],
                                  ops.cast(positions, "int32")[:, :, None], axis=1))
  transform = layers.MaskedLMTransform(config.hidden_size, config.hidden_act,
                                       config.initializer_range, name="predictions_transform")
  if masked is None:
    x = transform(encoded["sequence_output"], positions)
  else:
    x = transform(masked)
  x = word_embedding(x, reverse=True)  # tied to the input embeddings: [B, P, V]
  mlm_logits = layers.OutputBias(config.vocab_size, name="predictions_output_bias",
                                 dtype=layers.float32_policy(keras.config.dtype_policy()))(x)
  # Two outputs only: computing this in float32 costs nothing and keeps the logits float32.
  nsp_logits = keras.layers.Dense(
      2, kernel_initializer=layers.truncated_normal(config.initializer_range),
      name="seq_relationship", dtype=layers.float32_policy(keras.config.dtype_policy()))(
          encoded["pooled_output"])
  outputs = dict(masked_lm_logits=mlm_logits, next_sentence_logits=nsp_logits)
  if hidden is not None:
    outputs[MASKED_LM_HIDDEN] = hidden
  return keras.Model(inputs=inputs, outputs=outputs, name=name)


def model_inputs(packed: bool, cls_positions: bool = True):
  """The Keras inputs of a task model: the encoder's three, and with `packed` the packed rows'
  input_position_ids and (with cls_positions) packed_cls_positions."""
  inputs = {key: keras.Input(shape=(None,), dtype="int32", name=key) for key in ENCODER_INPUTS}
  if packed:
    inputs.update({k: v for k, v in packed_inputs().items()
                   if cls_positions or k != PACKED_INPUTS[1]})
  return inputs


def packed_args(inputs):
  """encoder_graph's packed-row arguments from the model inputs (none for unpacked ones)."""
  return dict(position_ids=inputs.get(PACKED_INPUTS[0]), cls_positions=inputs.get(
      PACKED_INPUTS[1]))


def pooled_head_model(config: BertConfig, outputs: int, layer_name: str, dropout_name: str,
                      name: str, packed: bool = False, unpadded: bool = False) -> keras.Model:
  """A head on the pooled output: dropout (named `dropout_name`), then one dense layer (named
  `layer_name`; its names in every format are the head's HeadSpec.weights) to `outputs` logits,
  the last transformer layer computing the [CLS] rows alone. The model of every registered head
  of that shape (heads that share the dense layer's name tell their models apart by the
  dropout's).

  Args:
    config: the encoder's hyperparameters.
    outputs: the logits per sequence.
    layer_name: the dense layer's name.
    dropout_name: the dropout layer's name (it holds no weights).
    name: the Keras model name.
    packed: take packed rows (bert_tf.row_packing): the inputs add input_position_ids [R, S]
      and packed_cls_positions [R, K], and the logits are one row per slot, [R * K, outputs].
    unpadded: when training unpacked rows, compute the layers' per-token sublayers on the real
      tokens alone (encoder_graph's unpadded): the same logits to float rounding, with the
      padding positions' share of the work saved. The inference graph is unchanged.

  Returns:
    A functional keras.Model: inputs input_word_ids, input_mask, input_type_ids (int32 [B, S]);
    output {"logits": float32 [B, outputs]}.
  """
  inputs = model_inputs(packed)
  # The head reads only the pooled output ([CLS]), so the last transformer layer computes that
  # row alone (each slot's [CLS] in packed rows): the same logits with 1/L of the layers' work
  # saved per step.
  cls_rows = (inputs[PACKED_INPUTS[1]] if packed
              else ops.zeros_like(inputs["input_word_ids"][:, :1]))
  encoded, _ = encoder_graph(config, inputs["input_word_ids"], inputs["input_mask"],
                             inputs["input_type_ids"], last_layer_positions=cls_rows,
                             unpadded=unpadded, **packed_args(inputs))
  pooled = layers.Dropout(config.hidden_dropout_prob, name=dropout_name)(
      encoded["pooled_output"])
  logits = keras.layers.Dense(
      outputs, kernel_initializer=layers.truncated_normal(config.initializer_range),
      name=layer_name, dtype=layers.float32_policy(keras.config.dtype_policy()))(pooled)
  return keras.Model(inputs=inputs, outputs={"logits": logits}, name=name)
