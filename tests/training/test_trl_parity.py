"""Our loss equals TRL 1.16's `GRPOTrainer._compute_loss` on the same tensors (value and gradient).

loss.py re-states TRL's maths for our multi-turn samples rather than driving TRL's trainer (see DESIGN.md,
"Learning: how we use TRL"); this pins the two together, so a TRL upgrade that changes the maths fails
here. It calls a private TRL method on purpose: it is the reference, not a dependency of the product.
"""

from __future__ import annotations

import pytest
import torch

from appliance.config import TrainingSettings
from appliance.training.loss import Normaliser, pack, policy_loss, token_logps

P, C = 5, 7  # prompt and completion lengths in TRL's layout


def trl_trainer(model, tokenizer, loss_type: str, beta: float, output_dir):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    level = "sequence" if loss_type == "gspo" else "token"
    args = GRPOConfig(output_dir=str(output_dir), per_device_train_batch_size=2, num_generations=2,
                      max_completion_length=C, use_cpu=True, bf16=False, report_to=[], beta=beta,
                      epsilon=0.2, epsilon_high=0.28,
                      loss_type="grpo" if loss_type == "gspo" else loss_type, importance_sampling_level=level)
    trainer = GRPOTrainer(model=model, reward_funcs=[lambda completions, **_: [0.0] * len(completions)], args=args,
                          train_dataset=Dataset.from_dict({"prompt": ["a", "b"]}), processing_class=tokenizer)
    # the samples came from an engine: switch on TRL's engine importance-sampling path (no vLLM is contacted)
    trainer.use_vllm, trainer.vllm_importance_sampling_correction = True, True
    trainer.current_gradient_accumulation_steps = 1
    trainer.model.train()
    return trainer


@pytest.mark.slow
@pytest.mark.parametrize(("loss_type", "beta"), [("grpo", 0.0), ("dapo", 0.0), ("dr_grpo", 0.0), ("gspo", 0.0),
                                                 ("dapo", 0.1)])
def test_loss_and_gradient_match_trl(tiny_model, tmp_path, loss_type, beta):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    ours_model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    trainer = trl_trainer(AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32), tokenizer,
                          loss_type, beta, tmp_path)

    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(10, 2000, (2, P + C), generator=g).tolist()
    tool = [[1, 1, 0, 0, 1, 1, 1], [1, 0, 1, 1, 1, 0, 0]]  # a tool span inside the completion
    lengths = [P + C, P + C - 2]  # the second completion is shorter: right padding
    masks = [[0] * P + tool[i][: lengths[i] - P] for i in range(2)]
    b = pack([tokens[i][: lengths[i]] for i in range(2)], masks, [[0.0] * n for n in lengths], [0.9, -0.4],
             pad_id=0, max_len=P + C)
    with torch.no_grad():
        logps0 = token_logps(ours_model, b.input_ids, b.attention_mask)
    old = logps0 + 0.1 * torch.randn(logps0.shape, generator=g)  # a policy ratio away from 1: clipping is live
    ref = logps0 + 0.2 * torch.randn(logps0.shape, generator=g)
    is_ratio = torch.exp(0.3 * torch.randn(logps0.shape, generator=g)).clamp(max=3.0)

    cfg = TrainingSettings(loss_type=loss_type, beta=beta, epsilon=0.2, epsilon_high=0.28)
    norm = Normaliser(sequences=2, tokens=b.trained_tokens, max_len=C)
    ours, _ = policy_loss(token_logps(ours_model, b.input_ids, b.attention_mask), old, ref if beta else None,
                          is_ratio, b.mask, b.advantages, cfg, norm)
    ours.backward()

    cut = slice(P - 1, None)  # our position t predicts token t+1: the completion starts at P-1
    inputs = {
        "prompt_ids": b.input_ids[:, :P], "prompt_mask": b.attention_mask[:, :P],
        "completion_ids": b.input_ids[:, P:], "completion_mask": b.attention_mask[:, P:],
        "tool_mask": b.mask[:, cut].long(), "advantages": b.advantages,
        "old_per_token_logps": old[:, cut], "importance_sampling_ratio": is_ratio[:, cut],
        "num_items_in_batch": torch.tensor(float(b.trained_tokens)),
    }
    if beta:
        inputs["ref_per_token_logps"] = ref[:, cut]
    theirs = trainer._compute_loss(trainer.model, inputs)
    theirs.backward()

    assert float(ours.detach()) == pytest.approx(float(theirs.detach()), rel=1e-5, abs=1e-7)
    ours_grads = dict(ours_model.named_parameters())
    for name, p in trainer.model.named_parameters():
        # fp32 but summed in another order (TRL's chunked fused head): compare in norm, not elementwise
        rel = (ours_grads[name].grad - p.grad).norm() / p.grad.norm().clamp(min=1e-12)
        assert rel < 1e-4, (name, float(rel))
