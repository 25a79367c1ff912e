"""Sampling-and-grading shared by training, ``kitae eval``, curation and long2short.

    rewards.py   a run's reward: named, weighted components (each a grader), graded concurrently per group,
                 None masked; the graders' counters; steps without a finite score (the whole reward, each
                 component) and what the run says about them
    evaluate.py  pass@1 over k samples, template compliance and lengths on a prompt set; what graders see of
                 one completion (``sample_dict``)

It sits below kitae.trainer, kitae.curate and kitae.long2short, which all use it, and above kitae.rollout and
kitae.graders, which it joins (docs/architecture.md).
"""
