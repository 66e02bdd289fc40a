"""Lesson 05 (data parallelism): the self-check quiz (``quiz(load_quiz("data_parallel"))``).

Answers and explanations are sealed (``ddl_lab.active.seal_choice`` /
``seal_number`` / ``seal_text``) so that they are not read at a glance; to change one,
seal the new text with those functions. Salt: ``"<slug>:<question number>"``.
"""
from ddl_lab.active import Question

QUESTIONS = [
    Question('ID2223 review question 1 (Teta & Zangis): in data-parallel learning with k devices, …',
             choices=('each device holds one layer of the model and the activations flow through them', 'each device holds the whole model, computes a gradient on its own mini-batch, and the k gradients are averaged', 'each device trains its own model and the best one is kept', 'the data set is copied to every device and each computes the full gradient'),
             salt='data_parallel:1', answer='e78ab5ddc5b991eeab8543de35c0614e65d34a32a52f74eb0f6d1ea573ed399c',
             why='NwUBSEwWB1NHHAYKDEIBDwkUAFIcAQEAAQYBAkkGDVkPCQdJGlQVWR1CTVdAGUwAt8wqSkwIMAFKRD9dAAgWTkkaFVlUCgBGAh0BRRVPHFQfCgMNRAUPXwMSERpEEQQQQwcWRgYBRU0WCxBMTB8OGQUIAEgACBFXAFweHFMRCghPQlwJVw=='),
    Question('Synchronous SGD on 4 workers; one becomes 3× slower than the others. The time per step becomes about how many times the old one?',
             number='H0YaD1ZBURYAVgZbGkJVSFkP',
             why='IRIJXxVBEU5FBFIOQQsRFU8UClJZGx1FTAMOGBBECVUJAhdOTwZIWVQKAEYcBhdBHggZRR5IHEsUBQ9ITBIHTlNUFw9FEBwEABYcBwpUVVQECk9YRAINXhhBEFtOHwFZUxIACAtSEUgcTxFJCgkKGQEKD0hMFgNTVB0cHg4='),
    Question('ID2223 review question 3 (Teta & Zangis): local SGD differs from synchronous SGD in that …',
             choices=('workers never communicate', 'workers take several local steps and average their models only at the sync times I_T', 'a parameter server applies stale gradients', 'each worker uses a different learning rate'),
             salt='data_parallel:3', answer='56e3b7f2232bf9d725cb1cc651743bf1b690f9b1caa311988aa106d75c29d4e8',
             why='JgEYWgkEDBpTDRwaSBAKCAYBBFQQABtTTAoOCAxEHkgcDQtZQVQUFkwOChEcUgxUCk8aVwJPCBkFAAVIAhURAQAVBllUQk5GXlKHqPFPPH84TxsDAUQBQggEDkkAXBcIVQsTBwMXC1QVFlkACgAdSxQIDUQCQTF9ZFQUC08PRQdPEQpNFAAbAB8bDhkQSExZBARCSVUZHxxEQhAWCxMRRQpGVUEeCk8KEgEeTAsEBhQ='),
    Question('96 steps of local SGD with averaging period H = 8: how many allreduces?',
             number='H0YaD1ZBUwgMVFANAlhFVkFCVF0=',
             why='KwoJDQ0XB0hBExdZRRQAFBZSLQAKGxBQH1VPUlJEQw1UQV8aEUZSUVMbCwUHAApOFhoGAD8oK0sTCxlBCEEMX0UQUkAWS0s='),
    Question('For plain SGD, averaging the models after EVERY step (H = 1) gives …',
             choices=('exactly synchronous SGD (up to float rounding)', 'a worse model than synchronous SGD', 'a diverging run', 'the same as one worker alone'),
             salt='data_parallel:5', answer='766e58d5b01c25782e848bf35a9db6bbabf4ef2de7df5a35cc9f5760c3726000',
             why='IhYDQEwIBl9OABsaQQ5FCwAWAEwKQ1VNCQ4BQxNEjqX+QayNABMtEAlCWEYYUoeo60+7l0wCCgoKTAtyBUhYGkECFwtBBQwICFIITx0KGVNMCh4eBQgfDQ0XB0hBExsXR0ICFA4WDEUXGwYAGwcKBUQQBEgVQQNIRVQTD0UQBAEKFkVFDwoHWUwcGw4USg=='),
]
