"""The classifier head and its registration with the model tier (HEAD_SPEC, named in
bert_tf/task_heads.py).

The original run_classifier.py's create_model: the encoder's pooled output, dropout (the config's
hidden_dropout_prob, 0.1 for the released models) and one dense layer to the label logits
(Hugging Face's BertForSequenceClassification). num_labels=None is a regression head (one
output, mean squared error), for STS-B.

Its dense layer is named "classifier": the original's root-scope output_weights [num_labels, H]
(transposed) and output_bias, Hugging Face's classifier.weight / classifier.bias (HEAD_WEIGHTS).
So a classifier fine-tuned with the original loads here and ours converts to the original's
names. The tagger's and the multiple-choice head's weights have the same names in every format;
which head a checkpoint holds is read from what is recorded beside it, and output_weights with
nothing recorded are a classifier's, as the original wrote them (facts.default). The classifier
is also the head of every task_name no other head claims (the GLUE tasks, "generic", ...).

This module imports the model tier only and reads no head kind at import: the model tier imports
it by name the first time the head kinds are read (provenance.registered_heads).
"""

from typing import Optional

import keras

from bert_tf.config import BertConfig
from bert_tf.model import head_specs
from bert_tf.model import heads
from bert_tf.model import provenance

# The head kind (task_info.json's "head").
CLASSIFIER = "classifier"
# The dense layer, and its dropout (whose name tells a one-output classifier from another
# registered head on the pooled output with the same dense layer).
HEAD_LAYER = "classifier"
DROPOUT = "classifier_dropout"
# The dense layer's weights in every format, shared with the tagger and multiple choice.
HEAD_WEIGHTS = head_specs.HeadWeights(HEAD_LAYER, ("output_weights", "output_bias"),
                                      ("classifier.weight", "classifier.bias"))


def build_classifier_model(config: BertConfig, num_labels: Optional[int],
                           name: str = "bert_classifier", packed: bool = False) -> keras.Model:
  """The encoder, dropout on the pooled output, and a dense layer to the logits.

  Args:
    config: the encoder's hyperparameters.
    num_labels: classes; None for a regression head (one output).
    name: the Keras model name.
    packed: take packed rows (bert_tf.row_packing): the inputs add input_position_ids
      [R, S] and packed_cls_positions [R, K], and the logits are one row per slot,
      [R * K, num_labels]. The layers and weights are the unpacked model's.

  Returns:
    A functional keras.Model: inputs input_word_ids, input_mask, input_type_ids (int32 [B, S]);
    output {"logits": float32 [B, num_labels]} (or [B, 1] for regression).
  """
  if num_labels is not None and num_labels < 2:
    raise ValueError(f"a classifier needs at least 2 labels, got {num_labels}")
  return heads.pooled_head_model(config, 1 if num_labels is None else num_labels, HEAD_LAYER,
                                 DROPOUT, name, packed)


def _recognise(model: keras.Model) -> bool:
  """A classifier's model: the dropout of its pooled output and logits per example ([B, C]; a
  tagger's are per position)."""
  names = {layer.name for layer in model.layers}
  return (DROPOUT in names and HEAD_LAYER in names
          and len(model.get_layer(HEAD_LAYER).output.shape) == 2)


HEAD_SPEC = head_specs.HeadSpec(
    kind=CLASSIFIER,
    facts=provenance.HeadKind("BertForSequenceClassification", output_weights=True,
                              labelled=True, regression=True, default=True),
    weights=HEAD_WEIGHTS,
    build=lambda config, outputs: build_classifier_model(config, None if outputs == 1 else outputs),
    recognise=_recognise,
    serving=head_specs.POOLED_LOGITS)
