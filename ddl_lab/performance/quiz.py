"""Lesson 13 (performance): the self-check quiz (``quiz(load_quiz("performance"))``).

Answers and explanations are sealed (``ddl_lab.active.seal_choice`` /
``seal_number`` / ``seal_text``) so that they are not read at a glance; to change one,
seal the new text with those functions. Salt: ``"<slug>:<question number>"``.
"""
from ddl_lab.active import Question

QUESTIONS = [
    Question('A square fp32 matrix product C = A·B of n × n matrices, each matrix read or written once from memory: what is its arithmetic intensity, in FLOP per byte, at n = 1024?',
             number='H0YaD1ZBUw0QWkRPFlRTUFlEUxZPWUMWQE9NH0ZeTB5CUR8=', unit='FLOP/byte',
             why='VgqunkwnLnVwB1JRQUIIEwMGDFAVFlVBAgtPCgpEDUkIQRJfUlQGHFIPTEYABABSWVy3l1gBrdlEBhVZCRJCEmFUExdEQidGHRcERFVPNgAbHQYfEAECAUxVQlhZABcKAAcEBQdbRR1ZAVoWTI3m40RVWxxCQStOABMAFlcRRREGBg0AF1VVQUwDDhkDAUxADRUQU1hUAgtPBhAFG1IMU1kMGk0cGhsOSQYDWAIFQlVOVBcPRRAcRgITBkgQARAMTA5PGAkFAEFMDgxfABkTAAAMChJPEAAO'),
    Question('Which operation of a training step sits farthest left on the roofline (lowest arithmetic intensity)?',
             choices=("the MLP's first matrix product at batch 256", 'the attention scores q·kᵀ of a sequence of 1024', 'the AdamW step: a handful of FLOPs per parameter against the parameter, its gradient and two moments read and written', 'they all have the same intensity; only their sizes differ'),
             salt='performance:2', answer='b1b9f99a2f50605cb247db37cf5cc4215529fd6d82cd8773d0bfd7cc27b70f61',
             why='JQANQDtBBlVFB1IYQg0QEk8TRUQWFRBOTCkjJDQXTF0JE0JKQQYTFEUWABRPEwtEWQIaVgkcTwoGCxlZTFNaGkINBhxTQgMJHVIMVFlHQQAYCgEYCxYfDR4EA14MVEFZVxAMEhsXCwAQAVVGHFxdQl5EGUMIBBAaTxoXWWYuKjZPAgBSWQ0MVAlDTw0FFkxBCQcWGk8SUhhOG0UlPydCU1kdHEQLCk8bCw0CWUBBEVUAHQZZUhcLFU8TEQAUChhPHhZPGBQBCUlCQTZSRVQfGFQQDB5PAhdPHRoWVB9PHQ4RFwkNCRcHSFlUHAxNAAAUTwYNRQBPGU8NC08GBQoVDRgID19TWg=='),
    Question('Kaplan et al. count 6N FLOPs per token for training a dense model of N parameters. Where does the 6 come from?',
             choices=('6 layers of a typical block', '2 in the forward pass (a multiply and an add per parameter) and 4 in the backward pass (the gradient with respect to the input and with respect to the weight, 2 each)', '2 forward, 2 backward and 2 for the optimizer step', '3 matrices (Q, K, V) of 2 FLOPs each'),
             salt='performance:3', answer='18f88589afc1a83146ffb73797d45bd6a056bafd7b084156fca07e9c91ad7edd',
             why='IQUPRUwWB1NHHAZZSRFFExwXAQAWARZFTB8KGUQQA0YJD0JTTlQTWU0XCRIGAglZVA4RRExHXUsiKCN9H0hCXE8GBRhSBl5GDRMGSw4OB0RMAQoOABdMWRsOQklVFxpZUBAKAhoREVNZHxBSTBgKAgMMGBdMDgxfABIdCwAWDQNPFRdBHQYQThhPCQcLEwVDC0EWVQAAGhwADgQfCgBCU1kGG1AZG0NLCwoJDQoOEBpUHBdZVwcMAQcGQlNZAAJOTAgdCgANCUMYT0JuSBFSFlAWDAsGCABSXhxVZiAgPxhEBR5ITBEHSAAEEwtBDwASCgBJABcAAQAcCh1LEAsHSAJNQltOEFIYUgdFCgoUEQAWGgEAAwlPHwwBTEADBQdWADI+NnARSw=='),
    Question('A GPT with N ≈ 12·L·h² non-embedding parameters and sequences of s = h tokens: the attention term 12·L·h·s is what fraction of 6N?',
             number='H0YaD1ZBUhQRQkRPFlRTUFlEUxZPWUMWWkNPSRBGVg1cT1ILXQ==', unit='',
             why='VVaumiCj1VLiwwFZD0JNUE+w0gBIXbeXIK3YA6bWRQ1RQREaD1RaT0hLRVtPQ0oWWQ4BAB9PUksMSkx5BARCTkUGH1lNAxESCgAWAB8ABwAAAAEMRBcJXBkEDFlFB1IYTgZFFQITCUxZGBxEGAccS4bk+A0ABBFJTxpSSBJFFkYoIjEAUQdVHUxZW0dEF0wQTFdWEwCW8u0AAwsCTxQERBwcVUYDHU8cDQAJDQEOBl9MB1IYVEIICQsXFlRZHFsAOwYbA0QFTE4NFBFbTFQfGFMJRQ4OHgMADQcQAB8MABkBF0xMHgRCVEUCFwsADAADCxcBG1kOGwAFAh8HAQkJQxgAFlNPGlINSAMRRhwZDFAKTwFICQJPDwsBHw0EAA5cAAAaHAADERIKHBFJFgFVZiAgPxhIRANDCUEWUkEAUhpPDxUTGxcWABgBEQABDhwAF0QYRQkMQhJBB1IWVRAWRgsdAFNQTxFPCRxPCggIQg=='),
    Question("A rank's trace shows backward from 0 to 10 ms and one allreduce from 7 to 13 ms. What is its overlap share (collective time under backward ÷ collective time)?",
             number='H0YaD1ZBUhQVWFJbVEBfRl9cVREE', unit='',
             why='MAwJDQ0NDkhFEAcaRUIJBxwGFgBPTxhTV09cSwsCTFkEBA8aCENSm6bwRVdfUghTUE8HVQJPGAMNCAkNDgABUVcVAB0AAQoLHwcRRQpDVVMDTwYfF0QfRQ0TBxpJB1JKD1RFW09CSxVVTxROCE9cSwkXTEweBEJfWAQdCkUGX0YbGgAAChsQUEwGHEtXRAFeTA0NVEcRAFlUCgQITxsRU1kMGk0cGhsKEA0DQ0JBLVRMDVINSAdFFg4AEQANBxRUTBwbAgcPHw0DFBYaQxsBDVNCEQ8CF0s='),
    Question("Data parallelism on n ranks, ring allreduce, latency α neglected. If the model's parameter count N doubles, the per-rank batch at which compute time equals communication time…",
             choices=('doubles', 'halves', 'grows as √2', "stays the same: compute grows as 6N per example and the gradient's bytes as 4N, so N cancels"),
             salt='performance:6', answer='38c71c8fb324067b44f944a06a1f9db700001ae89b0b350e7ddf109b21fa4df0',
             why='JwsBXRkVBxpQEQBZUxYAFk8bFgBPIbeXDkApS0wGTEgUAA9KTBEBWVAHF0YdEwtLVU8zABgHCksiKCN9QxJLAQAAGhwAEAwICFIWRRcLBgBeRwGJ7PZdBEMPoI0UOlIbWRYAFU8TEQC33VVTCQwABQAXTExMAxtORVpSPFEXBApPBQ1FF08XAFFPXUMKhuS/XUhNVOLDRruXrNek2DRKFkNPG09MIU8HAQIYA0w1Cl8AFwAWUxEKEAoARUkKTxQAHB0AGwEWGFRMDgQaVBwXWU0DBg4GHAAAUSm3l6LdVUsiKCN9H0ELTgAXHRRQFxEDHFIMTlkbHUVMGwYGAUQDQwlBAENUEVIaUg0WFQoBRVQRClVOCRsYBBYPRQ0NDwYaTxJSFwxCCwkbUgpGWRsdRUwCAA8BCFcNGAkHGkwVBhxOARxGocNFQR0LBgANTxsOFglMWQQAFhpGFQQWVRAWRgMTF0ccHVVNAwsKBxdK'),
]
