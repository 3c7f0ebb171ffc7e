"""The multiple-choice head and its registration with the model tier (HEAD_SPEC, named in
bert_tf/task_heads.py).

The paper's multiple-choice head (SWAG, section 4.4; Hugging Face's BertForMultipleChoice): each
choice is its own sequence through the encoder, its pooled [CLS] output, dropout and a dense
layer to one score; the task takes the softmax over an example's choices (loss.py).

Its dense layer has the classifier's name ("classifier"), so its weights are the original's
output_weights [1, H] / output_bias (run_classifier.py's convention with one output) and Hugging
Face's classifier.weight [1, H] / classifier.bias in every format (HEAD_WEIGHTS); its dropout's name
tells the model from a one-output (regression) classifier (HEAD_SPEC.recognise), and what is
recorded beside a checkpoint (task_info.json's "head", config.json's architectures) tells its
weights from a classifier's.

This module imports the model tier only and reads no head kind at import: the model tier imports
it by name the first time the head kinds are read (provenance.registered_heads).
"""

from typing import Mapping, Optional

import keras
import numpy as np

from bert_tf.config import BertConfig
from bert_tf.model import head_specs
from bert_tf.model import heads
from bert_tf.model import provenance

# The head kind (task_info.json's "head" and task_name).
MULTIPLE_CHOICE = "multiple_choice"
HEAD_LAYER = "classifier"
DROPOUT = "multiple_choice_dropout"
HEAD_WEIGHTS = head_specs.HeadWeights(HEAD_LAYER, ("output_weights", "output_bias"),
                                      ("classifier.weight", "classifier.bias"))


def build_multiple_choice_model(config: BertConfig, name: str = "bert_multiple_choice",
                                packed: bool = False, unpadded: bool = True) -> keras.Model:
  """The multiple-choice model (the module docstring).

  Args:
    config: the encoder's hyperparameters.
    name: the Keras model name.
    packed: take packed rows (bert_tf.row_packing): the inputs add input_position_ids [R, S]
      and packed_cls_positions [R, K], and the scores are one row per slot, [R * K, 1].
    unpadded: when training unpacked rows, the layers compute the real tokens alone (below);
      False for a step compiled whole by XLA (the real-token count is a per-batch shape).

  Returns:
    A functional keras.Model: inputs input_word_ids, input_mask, input_type_ids (int32 [N, S],
    one row per choice: an example of C choices is C rows); output {"logits": float32 [N, 1]}.
  """
  # Unpadded when training: pairs of a context and a choice are often well short of
  # max_seq_length (every row of a batch padded to its longest choice), so the layers compute
  # the real tokens alone (heads.pooled_head_model); the logits are the same.
  return heads.pooled_head_model(config, 1, HEAD_LAYER, DROPOUT, name, packed,
                                 unpadded=unpadded)


def _check_weights(values: Mapping[str, np.ndarray]) -> Optional[str]:
  outputs = head_specs.output_count(values)
  if outputs != 1:
    return f"a multiple-choice head has one output (a score per choice); this one has {outputs}"
  return None


HEAD_SPEC = head_specs.HeadSpec(
    kind=MULTIPLE_CHOICE,
    facts=provenance.HeadKind("BertForMultipleChoice", task_names=(MULTIPLE_CHOICE,),
                              output_weights=True),
    weights=HEAD_WEIGHTS,
    build=lambda config, outputs: build_multiple_choice_model(config),
    recognise=lambda model: DROPOUT in {layer.name for layer in model.layers},
    check_weights=_check_weights,
    serving=head_specs.POOLED_LOGITS)
