"""The optimizer's fields of the pre-training config, declared once (`OPTIMIZER`, the config's
`optimizer` section; train/optim.py builds AdamW and its schedule from them). A fine-tuning gives
its optimizer the same fields (finetune/config.py's `optimizer_config`)."""

from electra_jax.fields import Derived, Field as F, Section, AT_LEAST_1, one_of, rule

# ---- optimizer: AdamW as in the original release; may change when a run resumes ---------------
OPTIMIZER = Section(doc='AdamW and its schedule', resume='free', fields=dict(
    learning_rate=F(5e-4, 'peak learning rate (NaN would turn every parameter into NaN at the '
                    'first step while the loss and gradients stay finite; a negative one climbs '
                    'the loss)', rule(lambda x: x > 0, 'a positive number, e.g. 5e-4')),
    warmup_steps=F(10_000, 'linear warmup length', rule(lambda x: x >= 0, '0 or more steps')),
    decay_power=F(1.0, 'polynomial decay power (1.0: linear to 0 at train_steps)',
                  rule(lambda x: x >= 0, '0 (constant) or more, e.g. 1.0')),
    schedule=F('original', "'original': peak*decay*warmup multiplied | 'warmup_then_decay'",
               one_of('original', 'warmup_then_decay')),
    decay_steps=F(Derived(lambda c: c.get_ref('train_steps') + 0),
                  'steps over which the lr decays to 0', AT_LEAST_1),
    b1=F(0.9, 'Adam beta1', rule(lambda x: 0 <= x < 1, 'in [0, 1), e.g. 0.9')),
    b2=F(0.999, 'Adam beta2', rule(lambda x: 0 <= x < 1, 'in [0, 1), e.g. 0.999')),
    eps=F(1e-6, 'Adam epsilon', rule(lambda x: x > 0, 'a positive number, e.g. 1e-6')),
    bias_correction=F(False, 'the original Adam has no bias correction', one_of(False, True)),
    weight_decay=F(0.01, 'decoupled, multiplied by lr; not on LayerNorm parameters and biases',
                   rule(lambda x: x >= 0, '0 or more, e.g. 0.01')),
    grad_clip_norm=F(1.0, 'global-norm clip over all parameters; 0 disables',
                     rule(lambda x: x >= 0, '0 (no clipping) or more')),
))
