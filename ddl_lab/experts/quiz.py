"""Lesson 14 (experts): the self-check quiz (``quiz(load_quiz("experts"))``).

Answers and explanations are sealed (``ddl_lab.active.seal_choice`` /
``seal_number`` / ``seal_text``) so that they are not read at a glance; to change one,
seal the new text with those functions. Salt: ``"<slug>:<question number>"``.
"""
from ddl_lab.active import Question

QUESTIONS = [
    Question('Top-1 routing over E = 8 experts, a batch of T = 1,024 tokens, capacity factor 1.25. How many (token, choice) pairs can one expert take (its capacity C)?',
             number='H0YaD1ZBUwwQWFJbVEBfRl9cUF0=', unit='pairs',
             why='J0RRDY7t6llBBBMaSRYcRgkTBlQWHVXi2087S6bTTEZMTkJ/wvj7WR1Ch+rnQ0sSTE+3l0xeX1lQRK6aTFBCFQBMkPWpQlhGXkRVGlkOGwAJGQoFRBYDWBgEEBpXGwcVREIWAwEWRRFLV1VQDQYdGEQQAw0JAAFSABEKCUUQEUpPEwtEWRsdRUwJDggQCx4NAAQDTEUHUksVQkBGHB4EQxJPF0UKAB0ORBQNRB4SQltSEVIdUg0VFgoWSw=='),
    Question("Switch Transformer's load-balancing loss is E · Σ_i f_i · P_i. What is its value when the router is perfectly even (every f_i = P_i = 1/E)?",
             number='H0YaD1ZBUxQQWFJbVEBfRl9cVREE', unit='',
             why='IUSumkwkQviXVFpIDydFpNhSVA88RlUdTF5DSw0QHw0BCAxTTQEfQgAVDQMBUgpOHE8QWBwKHR9EEA1GCRJCX1YRAAAAFgoNChxFVxAbHQAcHQAJBQYFQQUVGxoRVBsNABAABwwaAFNZKlsAOAcKSwgLH15MERdJSBEBWVQKAEYdHRBUHB1VVAMYDhkAF0xIGgQMGkwbEx1TQhEOHR0QRxFPAUgJTz80DUhMWgQIAVIAFxMLUhtFEgcXRUcLDhFJCQEbS0wQBEhMAg1PTgABWUY9DEYHExNFWQEaTglGQQ=='),
    Question('Expert parallelism over n ranks, one expert per rank, an even router. What fraction of the pairs a rank routes leaves the rank in the dispatch all-to-all?',
             choices=('(n − 1)/n: the pairs for its own expert stay', 'all of them', '1/n', 'none: the experts come to the tokens'),
             salt='experts:3', answer='3ebdc7598a7bba486e376bcd3001b7de69d09a0d9f10c05ea577037a02edd4d3',
             why='IQUPRUwRA1NSVBUWRRFFEgBSCk4cTxpGTAFPDhwUCV8YEk4aTxoXWU8ERRIHFwgAFQAWQQBVT0MKRI6l/kFTEw8aUhZGQhEOCh9FQwsABlNMGwcORBMFXwlNQltOEFIYU0IIBwELRUMWAhAADg4MAEQNAg0YCQcaQxsfG0kMAF1PEARDEhgUUghPCwQBF0xZBARCSUEZF1lBBQQPAVISSQ0HVVQECk8MFgUIRAkPFkkOVDMXABcLBA4eBE4aChEAHgAaHwEWTE4EAAxdRQdSDUgHRRUfHgxUWRwcWgkcQ0sKCxgNGAkHGlIBHhwO'),
    Question('Why do frameworks put tensor parallelism on the innermost mesh dimension (consecutive ranks, inside one node)?',
             choices=('it communicates inside every layer, several times per micro-batch, so it needs the fastest link', 'it needs the fewest ranks', 'the data-parallel all-reduce cannot cross nodes', 'pipeline stages must share memory'),
             salt='experts:4', answer='8621fc593592bc890a90f9a0760ad639bc23ad9651bbc6d9d5c46f613f18d866',
             why='MAECXgMTQkpBBhMVTAcJDxwfRUEVA1hSCQsaCAEXTFkEBEJbQwAbD0EWDAkBAUVGFhoHABgGAg4XRBxIHkEOW1kRAFlBDAFGAhsGUhZCF0EYDAdLTCkJSg0VEFVOWT40CU5FCQFSEUgcTxZSBRsGCAUITF0NFQoBABATDUFCFQcdEwlMHAMcUwFPDgcISR5ICBQBX1NUBhFFQgIUDhYMRRcbBgADAQwORAVMXhgEEhpBGhZZQwMLRgAEAFIVDgUAGAcKBkQTBVkEQQBbQx8FGFIGXkYOUhVJCQoZSQIKTxgBCgheTA4MXwAVEQ1JFAQSBh0LAAkKBwABBgwZC0kOTBgCChpCEQYORQcLRgEXDEcRDRpVHhxBSzcLTHk8QQVVRQdSFk5CKzAjGwtLWQYbUwULCksFRAJCCAROGlAdAhxMCwsDTxMLRFkLFFQNTx8KFgUAQQkNC0lNVBMaUg0WFU8cCkQcHFUIIg4dCh0FAkwCQQdOABUeVwBQVVReW0s='),
    Question('In the ring model, how many times the bytes of plain data parallelism (DDP) does ZeRO-3 (FSDP) put on the wire per step, for the same model and data-parallel degree?',
             number='H0YaD1ZBUxQVWFJbVEBfRl9cVREE', unit='×',
             why='ICA8F0wODF8AFR4VDRAAAhoRAAAWCVVUBApPDBYFCEQJDxZJDFRAt4hCDAhPBwtJDRxVTwpPRw9EhuS/TFBLFURaUiNFMCpLXEhFQRdPFEwAQggKEAwJX0wOBBpUHBdZVwcMAQcGFgAfAAdXDR0LS0yqxARAQQNUTwAaHFJCBwcMGRJBCwtVCKLHRkdEBUxfCQUXWUVZARpBFhEDHVIKRlkbHUVMCB0KAA0JQxgSQhLu3FtDAFGrzkNSVA5MrOIARD0OAQYMDUMIABBTABEGWUEOS0ZdQlcQVU+3h1tGQQ=='),
    Question('A checkpoint saved with torch.distributed.checkpoint under DP × TP on 4 ranks loads under FSDP on 2 ranks. What makes that possible?',
             choices=("its metadata records each tensor's global shape and where each saved chunk (offsets, sizes) lies, so each new rank reads the pieces it now holds", 'rank 0 gathered the whole model into one file', "FSDP converts TP's shards on the fly with an all-to-all", 'it cannot: a checkpoint loads only under the layout that saved it'),
             salt='experts:6', answer='73298d85591957245ea39e74856c635059c20d85b1f79f8781aa7fb0e9606416',
             why='IRIJXxVBEFtOH1IOUgsRAxxSCk4VFlVJGBxPBBMKTF4EABBeU1RaFk4HRUgLGxZUGh9VRgUDCksBBQ9FQEELVAAEEwtBDgkDA1tFQRcLVVQECk8ICwseSQUPA05PBlIOUgsRAxxSS00cGxREDRsOUEQFGA0ADgNeAAAbFEVCAAcMGkVSGAEeAA0cBBhEAgNfTBUKXwAEGxxDBxZGBgYWABUODE8ZG08DCwgIXkwADF4ABhcYRBFFEgcXCAAfHRpNTBgHAgcMCVsJE0JJQQIXHQABDRMBGRYAFhkQUgAOH0sQDAlAVkEWUkVUABxTCgQUCxsLR1kHFFAcCgEYRA0CDRgJBxpMGxMdDkIpAxwBCk5ZXkQHH08MAwEHB10DCAxOAAMTCgANCwNPFAxMHE8aRkwYBwQIAUxZCQ8RVVIHXllXEAwSGxcLABsWVVINAQRLVEo='),
]
