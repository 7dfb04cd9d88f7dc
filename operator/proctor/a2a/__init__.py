"""Talking to agents under test over A2A.

* `message`: the message that asks an agent to solve one task (pure);
* `extract`: the patch and the usage figures in an agent's reply (pure);
* `client`: send the message, follow the task to its end, return a `SolveResult`.

The client speaks a2a-sdk 1.x and reaches agents served by a2a-sdk 0.3.x or 1.x
servers, streaming or not. The reference agents that answer it live in
`proctor.agents`.
"""
