"""a2a-sdk 0.3: a scripted agent and a client on that SDK, run in a venv of their own
(`sdk03`), and what the scripted agents of both SDKs do (`scripted`)."""
