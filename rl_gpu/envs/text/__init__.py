"""Text generation as an environment: a batch of prompts, the next token as the action, a response as an
episode (:mod:`rl_gpu.envs.text.generation`), and the tasks built on it (:mod:`rl_gpu.envs.text.addition`)."""
