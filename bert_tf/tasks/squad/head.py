"""The span (SQuAD) head and its registration with the model tier (HEAD_SPEC, named in
bert_tf/task_heads.py).

The original run_squad.py's create_model: one dense layer from every position's final hidden
state to a start and an end logit (Hugging Face's BertForQuestionAnswering). Its dense layer,
"squad_logits" ([H, 2]), is the original's cls/squad/output_weights ([2, H]) and output_bias and
Hugging Face's qa_outputs.weight / qa_outputs.bias (HEAD_WEIGHTS). The model has no pooler (nor
has Hugging Face's): a conversion leaves out the pooler the original's layout holds.

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

# The head kind (task_info.json's "head" and task_name).
SQUAD = "squad"
# The span head's dense layer ([H, 2]).
HEAD_LAYER = "squad_logits"
HEAD_WEIGHTS = head_specs.HeadWeights(HEAD_LAYER,
                                      ("cls/squad/output_weights", "cls/squad/output_bias"),
                                      ("qa_outputs.weight", "qa_outputs.bias"), outputs=2)


def build_span_model(config: BertConfig, name: str = "bert_span_labeler",
                     packed: bool = False) -> keras.Model:
  """The encoder and the original run_squad.py's head: one dense layer from every position's
  final hidden state to a start and an end logit (no dropout in the head, nothing masked).

  With packed=True the inputs add input_position_ids (packed rows, bert_tf.row_packing) and
  the logits stay per position of the rows (the span loss reads each example's own positions:
  tasks/squad/loss.py).

  Returns:
    A functional keras.Model: inputs input_word_ids, input_mask, input_type_ids (int32 [B, S]);
    outputs {"start_logits", "end_logits"}: float32 [B, S].
  """
  inputs = heads.model_inputs(packed, cls_positions=False)
  encoded, _ = encoder_graph(config, inputs["input_word_ids"], inputs["input_mask"],
                             inputs["input_type_ids"], **heads.packed_args(inputs))
  logits = keras.layers.Dense(
      2, kernel_initializer=layers.truncated_normal(config.initializer_range),
      name=HEAD_LAYER, dtype=layers.float32_policy(keras.config.dtype_policy()))(
          encoded["sequence_output"])
  return keras.Model(inputs=inputs, outputs={"start_logits": logits[:, :, 0],
                                             "end_logits": logits[:, :, 1]}, name=name)


HEAD_SPEC = head_specs.HeadSpec(
    kind=SQUAD,
    facts=provenance.HeadKind("BertForQuestionAnswering", task_names=(SQUAD,)),
    weights=HEAD_WEIGHTS,
    build=lambda config, outputs: build_span_model(config),
    recognise=lambda model: HEAD_LAYER in {layer.name for layer in model.layers},
    serving=head_specs.START_END_LOGITS,
    pooler=False)
