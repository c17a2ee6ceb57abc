"""trajpriv models: PateGAIL / PateGAIL++ in pure torch (no pyspark, nothing from jobs/).

Entry points: `models.train.fit(TrainConfig, TrainData) -> FitResult`,
`models.synthesis.synthesize(policy, env, start_probs, n, gen)`. Seams for distribution:
`models.critics.local_moments` (per-rank sums to all-reduce), `Moments.merge`, the schemes'
`release(moments, gen=..., spend=...)` (noise from one dedicated generator), and
`models.aggregation.ldp.perturbed_moments` / `ldp_noise` for the LDP variant.
"""
