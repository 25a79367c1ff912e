"""HTTP plumbing shared by kitae's servers and clients, free of torch and of every other kitae part.

    server.py    the server class, the bind rule and access token, the request handler with its body limits
                 (``kitae serve model``, ``kitae serve rm``, ``kitae ui``, the tests' scripted servers)
    requests.py  request checks before any model work (JSON, fields, messages, work limits)
    client.py    retries with backoff, a concurrency limit and counters for JSON-over-HTTP clients (the judge,
                 the reward-model client, the server rollout engine), and the bearer header from an env variable

Nothing is imported here, so importing one module does not import the others.
"""
