"""Peers built from our BertConfig, shared by the benchmark scripts (imported by path)."""


def model_garden_encoder(config, encoder_class, initializer):
  """A Model Garden encoder (networks.BertEncoder or BertEncoderV2) of config's sizes, with the
  original's tanh GELU (our "gelu"), dropouts and initializer."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  return encoder_class(
      vocab_size=config.vocab_size, hidden_size=config.hidden_size,
      num_layers=config.num_hidden_layers, num_attention_heads=config.num_attention_heads,
      max_sequence_length=config.max_position_embeddings,
      type_vocab_size=config.type_vocab_size, inner_dim=config.intermediate_size,
      inner_activation=lambda x: tf_keras.activations.gelu(x, approximate=True),
      output_dropout=config.hidden_dropout_prob,
      attention_dropout=config.attention_probs_dropout_prob, initializer=initializer)
