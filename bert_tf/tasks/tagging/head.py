"""The tagger (token classification) head and its registration with the model tier (HEAD_SPEC,
named in bert_tf/task_heads.py).

Hugging Face's BertForTokenClassification and the paper's NER setup: dropout on every position's
final hidden state and a dense layer to the label logits. Its layers are named as the
classifier's, so its weights are the original's output_weights [num_labels, H] / output_bias and
Hugging Face's classifier.weight / classifier.bias in every format (the common TF1 BERT NER code
uses those names for the per-token head too); its logits per position tell its model from a
classifier's, and its model has no pooler (nor has Hugging Face's): a training checkpoint
without one holds a tagger, and a conversion leaves out the pooler the original's layout holds.

This module imports the model tier only and reads no head kind at import: the model tier imports
it by name the first time the head kinds are read (provenance.registered_heads).
"""

import keras

from bert_tf.config import BertConfig
from bert_tf.model import head_specs
from bert_tf.model import heads
from bert_tf.model import layers
from bert_tf.model import provenance
from bert_tf.model.encoder import encoder_graph

# The head kind (task_info.json's "head"); "ner" is the task_name of the runs that train it.
TAGGER = "tagger"
TASK_NAME = "ner"
# The dense layer and its dropout, named as the classifier's (the same weights in every format).
HEAD_LAYER = "classifier"
DROPOUT = "classifier_dropout"
HEAD_WEIGHTS = head_specs.HeadWeights(HEAD_LAYER, ("output_weights", "output_bias"),
                                      ("classifier.weight", "classifier.bias"))


def build_tagger_model(config: BertConfig, num_labels: int, name: str = "bert_tagger",
                       packed: bool = False) -> keras.Model:
  """The encoder, dropout on every position's final hidden state and a dense layer to the
  label logits (BertForTokenClassification's head; the paper's NER setup).

  The layers are named as the classifier's (DROPOUT, HEAD_LAYER), so the head's weights are the
  original's output_weights [num_labels, H] and output_bias in every format.

  With packed=True the inputs add input_position_ids (packed rows, bert_tf.row_packing) and
  the logits stay per position of the rows.

  Returns:
    A functional keras.Model: inputs input_word_ids, input_mask, input_type_ids (int32 [B, S]);
    output {"logits": float32 [B, S, num_labels]}.
  """
  if num_labels < 1:
    raise ValueError(f"a tagger needs at least 1 label, got {num_labels}")
  inputs = heads.model_inputs(packed, cls_positions=False)
  encoded, _ = encoder_graph(config, inputs["input_word_ids"], inputs["input_mask"],
                             inputs["input_type_ids"], **heads.packed_args(inputs))
  hidden = layers.Dropout(config.hidden_dropout_prob, name=DROPOUT)(
      encoded["sequence_output"])
  logits = keras.layers.Dense(
      num_labels, kernel_initializer=layers.truncated_normal(config.initializer_range),
      name=HEAD_LAYER, dtype=layers.float32_policy(keras.config.dtype_policy()))(hidden)
  return keras.Model(inputs=inputs, outputs={"logits": logits}, name=name)


def _recognise(model: keras.Model) -> bool:
  """A tagger's model: its dense layer's logits per position ([B, S, C])."""
  names = {layer.name for layer in model.layers}
  return HEAD_LAYER in names and len(model.get_layer(HEAD_LAYER).output.shape) == 3


HEAD_SPEC = head_specs.HeadSpec(
    kind=TAGGER,
    facts=provenance.HeadKind("BertForTokenClassification", task_names=(TASK_NAME,),
                              output_weights=True, labelled=True),
    weights=HEAD_WEIGHTS,
    build=lambda config, outputs: build_tagger_model(config, outputs),
    recognise=_recognise,
    serving=head_specs.POSITION_LOGITS,
    pooler=False)
