-- wrk script: POST a small chat completion request.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model": "llmsim", "messages": [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Say something short."}], "max_tokens": 16}'
