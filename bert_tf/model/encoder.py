"""build_encoder(config): the BERT encoder as a Keras 3 functional model.

Inputs (int32, [batch, seq], both sizes dynamic), named like the TF Hub BERT encoders:
  input_word_ids, input_mask (1 = real token, 0 = padding), input_type_ids.
Outputs (a dict):
  sequence_output [B, S, H], pooled_output [B, H], encoder_outputs: a list of [B, S, H], one per
  transformer layer (the last one equals sequence_output).

Layer names follow the original checkpoint scopes (see checkpoints.py for the exact table):
  word_embeddings, embeddings, layer_0 ... layer_{L-1}, pooler.
"""

import keras

from bert_tf import row_packing
from bert_tf.model import layers
from bert_tf.config import BertConfig

ENCODER_INPUTS = ("input_word_ids", "input_mask", "input_type_ids")
# What packed rows add (bert_tf.row_packing): position ids [B, S] and [CLS] positions [B, K].
PACKED_INPUTS = (row_packing.POSITION_IDS, row_packing.CLS_POSITIONS)


def packed_inputs():
  """The symbolic inputs packed rows add to ENCODER_INPUTS'."""
  # K [CLS] positions per row: a static width (the pretraining head slices after them).
  shapes = {PACKED_INPUTS[0]: (None,), PACKED_INPUTS[1]: (row_packing.MAX_EXAMPLES_PER_ROW,)}
  return {key: keras.Input(shape=shapes[key], dtype="int32", name=key) for key in PACKED_INPUTS}


def encoder_graph(config: BertConfig, word_ids, input_mask, type_ids,
                  last_layer_positions=None, position_ids=None, cls_positions=None,
                  unpadded: bool = False):
  """Applies freshly made encoder layers to symbolic inputs.

  Shared by build_encoder and heads.build_pretraining_model so that the pretraining model is one
  flat graph in which the masked LM head can call the word embedding layer again (weight tying
  that survives .keras save and reload).

  Args:
    config: the model hyperparameters.
    word_ids, input_mask, type_ids: symbolic int32 tensors [B, S].
    last_layer_positions: optional symbolic int32 [B, Q] whose first column is 0: the last
      layer then computes only these rows, so sequence_output and the last encoder_outputs
      entry are [B, Q, H] (the full outputs gathered there) and pooled_output is unchanged.
      For packed rows its first K columns must be cls_positions.
    position_ids, cls_positions: packed rows (bert_tf.row_packing): with position_ids [B, S]
      (each token's position in its example), input_mask holds each position's example slot
      (1..K, 0 = padding) and attention stays within an example; cls_positions [B, K] (each
      slot's [CLS] position) makes pooled_output [B * K, H], one row per slot (slot order);
      without it, packed rows have no pooled_output (None).
    unpadded: when training unpacked rows, the transformer layers compute their per-token
      sublayers on the real tokens alone (TransformerBlock's unpadded path): the outputs at
      real positions are the same to float rounding, those at padding positions are 0. For
      models whose heads read real positions only.

  Returns:
    (outputs, word_embedding_layer): outputs is the dict described in the module docstring.
  """
  word_embedding = layers.WordEmbedding(
      config.vocab_size, config.hidden_size, config.initializer_range, name="word_embeddings")
  x = word_embedding(word_ids)
  embeddings = layers.EmbeddingPostprocessor(
      config.hidden_size, config.type_vocab_size, config.max_position_embeddings,
      config.hidden_dropout_prob, config.initializer_range, name="embeddings")
  packed = position_ids is not None
  if cls_positions is not None and not packed:
    raise ValueError("cls_positions are for packed rows: give position_ids too")
  if packed:
    x = embeddings(x, type_ids, position_ids)
    input_mask = layers.PackedAttentionMask(name="packed_attention_mask")(input_mask)
  else:
    x = embeddings(x, type_ids)
  encoder_outputs = []
  # A Python value of the layers' call, like `training`: the inference graphs stay as they are.
  options = dict(unpadded=True) if unpadded and not packed else {}
  for i in range(config.num_hidden_layers):
    block = layers.TransformerBlock(
        config.hidden_size, config.num_attention_heads, config.intermediate_size,
        config.hidden_act, config.hidden_dropout_prob, config.attention_probs_dropout_prob,
        config.initializer_range, name=f"layer_{i}")
    if i == config.num_hidden_layers - 1 and last_layer_positions is not None:
      x = block(x, input_mask, last_layer_positions, **options)
    else:
      x = block(x, input_mask, **options)
    encoder_outputs.append(x)
  pooler = layers.Pooler(config.hidden_size, config.initializer_range, name="pooler")
  if not packed:
    pooled = pooler(x)
  elif cls_positions is None:  # packed rows without [CLS] positions: nothing to pool
    pooled = None
  elif last_layer_positions is not None:  # the last layer computed the [CLS] rows first
    pooled = pooler(x, cls_positions, gathered=True)
  else:
    pooled = pooler(x, cls_positions)
  outputs = dict(sequence_output=x, pooled_output=pooled, encoder_outputs=encoder_outputs)
  return outputs, word_embedding


def build_encoder(config: BertConfig, name: str = "bert_encoder",
                  packed: bool = False) -> keras.Model:
  """The BERT encoder; its layers follow the current Keras dtype policy.

  Args:
    config: the model hyperparameters.
    name: the Keras model name.
    packed: take packed rows (bert_tf.row_packing): the inputs add PACKED_INPUTS
      (input_position_ids [R, S], packed_cls_positions [R, K]); sequence_output and
      encoder_outputs stay per position of the rows, pooled_output is one row per slot
      [R * K, H]. The layers and weights are the unpacked encoder's.

  Returns:
    A functional keras.Model with dict inputs (ENCODER_INPUTS) and dict outputs.
  """
  inputs = {key: keras.Input(shape=(None,), dtype="int32", name=key) for key in ENCODER_INPUTS}
  if packed:
    inputs.update(packed_inputs())
  outputs, _ = encoder_graph(config, inputs["input_word_ids"], inputs["input_mask"],
                             inputs["input_type_ids"],
                             position_ids=inputs.get(PACKED_INPUTS[0]),
                             cls_positions=inputs.get(PACKED_INPUTS[1]))
  return keras.Model(inputs=inputs, outputs=outputs, name=name)
