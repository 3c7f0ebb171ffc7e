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

from bert_tf.model import layers
from bert_tf.config import BertConfig

ENCODER_INPUTS = ("input_word_ids", "input_mask", "input_type_ids")


def encoder_graph(config: BertConfig, word_ids, input_mask, type_ids,
                  last_layer_positions=None):
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

  Returns:
    (outputs, word_embedding_layer): outputs is the dict described in the module docstring.
  """
  word_embedding = layers.WordEmbedding(
      config.vocab_size, config.hidden_size, config.initializer_range, name="word_embeddings")
  x = word_embedding(word_ids)
  x = layers.EmbeddingPostprocessor(
      config.hidden_size, config.type_vocab_size, config.max_position_embeddings,
      config.hidden_dropout_prob, config.initializer_range, name="embeddings")(x, type_ids)
  encoder_outputs = []
  for i in range(config.num_hidden_layers):
    block = layers.TransformerBlock(
        config.hidden_size, config.num_attention_heads, config.intermediate_size,
        config.hidden_act, config.hidden_dropout_prob, config.attention_probs_dropout_prob,
        config.initializer_range, name=f"layer_{i}")
    if i == config.num_hidden_layers - 1 and last_layer_positions is not None:
      x = block(x, input_mask, last_layer_positions)
    else:
      x = block(x, input_mask)
    encoder_outputs.append(x)
  pooled = layers.Pooler(config.hidden_size, config.initializer_range, name="pooler")(x)
  outputs = dict(sequence_output=x, pooled_output=pooled, encoder_outputs=encoder_outputs)
  return outputs, word_embedding


def build_encoder(config: BertConfig, name: str = "bert_encoder") -> keras.Model:
  """The BERT encoder; its layers follow the current Keras dtype policy.

  Args:
    config: the model hyperparameters.
    name: the Keras model name.

  Returns:
    A functional keras.Model with dict inputs (ENCODER_INPUTS) and dict outputs.
  """
  inputs = {key: keras.Input(shape=(None,), dtype="int32", name=key) for key in ENCODER_INPUTS}
  outputs, _ = encoder_graph(config, inputs["input_word_ids"], inputs["input_mask"],
                             inputs["input_type_ids"])
  return keras.Model(inputs=inputs, outputs=outputs, name=name)
