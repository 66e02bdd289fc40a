"""Lesson 11 (scaling out): the self-check quiz (``quiz(load_quiz("scaling_out"))``).

Answers and explanations are sealed (``ddl_lab.active.seal_choice`` /
``seal_number`` / ``seal_text``) so that they are not read at a glance; to change one,
seal the new text with those functions. Salt: ``"<slug>:<question number>"``.
"""
from ddl_lab.active import Question

QUESTIONS = [
    Question("After loss.backward() on a DDP model, each rank's p.grad holds …",
             choices=('the gradient of its own mini-batch only', "the sum of all ranks' gradients", "the mean of all ranks' gradients", "rank 0's gradient, broadcast"),
             salt='scaling_out:1', answer='4417dfe3ca96845ea62acb932384ce8048fc1fca1d6b80bb7a9e7d64756569bb',
             why='ICA8DQ0NDkhFEAcaRRFFAw4RDQAbGhZLCRtPDxEWBUMLQQBbQx8FGFIGRQcBFkVEEBkcRAkcTwkdRBhFCUEVVVIYFllTCx8DQ1IWT1kKA0UeFk8ZARQARA8AQklUEQIKABUMEgdSEUgcTwZBAQpPChIBHkwLBAYaRwYTHUkHCxJVUglFChwaTkxfWkwXRB9UAgIKSE8aHQxTQjYhK15F7u04WnJMBgEICBEISAhP'),
    Question('Two hosts, two processes each, rendezvous on host A. Which MASTER_ADDR does a process on host B get?',
             choices=('its own address', "host A's address, where the store runs", 'localhost', 'the address of the other process on host B'),
             salt='scaling_out:2', answer='4042f21f0bb67fa794aaa77bd6834ce72c729b33f48e4a903196d9ffeaa3019d',
             why='IRIJXxVBEkhPFxcKU0IIExwGRVIcDhZITBsHDkQLAkhMEhZVUhFSDUgDEUYdEwtLWV9VSAMcGxheRAVZH0EDXkQGFwpTQgwVTwYNRVkKG0QcAAYFEEMfA0wgQkpSGxEcUxFFCA4fDE4eTxxUHwoDDUQTDUQYEkJcTwZSGAAREQkdF0VOFg0aRBVPHB8FFhhICFpCVk8XExVIDRYSTx0LABEABlRMLU8CF0QEQh8VQngO'),
    Question('A job checkpoints every 5 steps and a worker is killed during step 14 (13 steps done). After the restart, how many steps are done a second time?',
             number='H0YaD1ZBURYAVgZbGkJVSF9DGA==',
             why='LRBMXwkSF1dFB1IfUg0IRhsaAAAVDgZUTAwHDgcPHEIFDxYWABUUDUUQRRUbFxUASF9ZAA0BC0sWAQhCCRJCSVQRAgoAU1RKT0NXABgBEQBdXFVLEAwJDRsOEFEABxsXQwdFEgcXRUwYHAEADwcKCA8UA0QCFUJTU1QeFlMWSw=='),
    Question('FedAvg: client A holds 100 examples and returns a weight of 1.0, client B holds 300 and returns 3.0. What is the new global weight?',
             number='H0YaD1ZBUBQVWFJbVEBfRl9cVREE',
             why='MwEFSgQVB14AFgtZVAoARgsTEUFZHBxaCRxVS0xVXB2u1lMUEFRZWRNSVaTYQUsQUE9aAFhfX0tZRF4DWU9CbkgRUgxOFQAPCBoRRR1PGEUNAUNLVkpcAUwWDU9MEFIaTxcLEk8zQlNZXkUQTAoXCgkUAEgfQQNJABkHGkhCBBVPMEJTWVxFEEI='),
    Question('A ring allreduce of S = 64 MB among 8 workers over 1 Gbit/s links (β = 8 ns per byte), latency ignored: about how many seconds?',
             number='H0YaD1ZBUhQZWFJbVEBfRl9cVRUE',
             why='VkwCz+TzUxMPGlK7l0I2Rq3FRe7LT0gAXk+t3ERTQxVMo9UaFkAXTwCg0kZXF0gZWY38qExfQVJEF1YNCRcHSFlUAQ1FEkUJCVIBQQ0OVVANHQ4HCAEARB8MQkpBDQFZVAoEEkNSEkgYGxBWCR1PHwwBTE8NFQFSAJby7QALEUYGAUVXEQ4BABgHCksHCwFdGRUHGlARAFlTFgAWTx8QUw1PEVcNHQlF'),
    Question("Trong-Hop Do's lecture: which networks are good candidates for distributed training?",
             choices=('small and shallow networks', 'networks with parameter sharing, such as CNNs and RNNs', 'any network above a million parameters', 'networks trained with small mini-batches'),
             salt='scaling_out:6', answer='153fea7071c26a81695009b207b330bec7a4f476df6d37c08343d01d6e1ac755',
             why='MAwJVEwFDRpNARERAAEKCx8HEUENBhpOTB8KGUQUDV8NDAdORQZeWVMNRQdPARFFCUgGAA8AAhsREA1ZBQ4MGkkHUhVBEAIDTxMCQRABBlRMGwcORAYVWQkSQlVGVBsNU0ICFA4WDEUXGwYbTBwCCggITEwCBUJJSBUeFU8VRQgKBhJPCwQGAAgATwcNEBhBCUEBVU0EBw1BFgwJAVIVRQtPHFQJHQ4fDQsCAUwADF4AABocSRBFBwMeF0UdGhZFTAsABg0KDVkJEkw='),
]
