"""Lesson 10 (training memory): the self-check quiz (``quiz(load_quiz("memory"))``).

Answers and explanations are sealed (``ddl_lab.active.seal_choice`` /
``seal_number`` / ``seal_text``) so that they are not read at a glance; to change one,
seal the new text with those functions. Salt: ``"<slug>:<question number>"``.
"""
from ddl_lab.active import Question

QUESTIONS = [
    Question('A model of 1 billion parameters trains with Adam in fp32 (4 bytes each for value, gradient and both moments) on 4 ranks under ZeRO-1. How many GB of parameters, gradients and optimizer state does each rank hold?',
             number='H0YaD1ZBUwoMVFANAlhFVkFCUF0=',
             unit='GB',
             why='PgE+YkFQQklIFQAdU0IKCAMLRVQRClVPHBsGBg0eCV9MEhZbVBFIWRRCIiRPHQMACQ4HQQEKGw4WF0xMAgVCDgAzMFlPBEUBHRMBSRwBAVNMHBsKHUQbRQMNBxpPGlIcVgcXH08ABE4SQ1VhCA4CTBdEVA0rI0JVRlQfFk0HCxIcUgRSHE8GUAAGG0sCCxlfTBYDQ1NYUksAJSdGChMGSENPQQBHT1tLT0ReDVFBUwoAMzBZCFNTRigwRVcQGx1PGRtPMQE2IwRC'),
    Question("Per step, how many bytes does a rank send under ZeRO-3 compared with data parallelism (DDP's ring allreduce)?",
             choices=('the same', '1.5 times as many', 'twice as many', 'n times as many'),
             salt='memory:2', answer='d508aa35d9768e8aad55fbaf3827564a84866fc0730704d4d7738f83de84769a',
             why='ICA8Ch9BA1ZMBhcdVQEARgYBRUFZHRBEGQwKRhcHDVkYBBAaQRoWWUEMRQcDHkhHGBsdRR5VT1mqzExbDQ0XX1NUWg1JDwAVT1oLwvH9RAlDAUZFRD4JfyNMURpBGB5URwMRDgoAFgAcDhZITAMOEgEWS15MEQNIQRkXDUUQFkYJHRcADQcQAAoAHRwFFggNDQ8GGkETExBOQgMJHVIRSBxPF0EPBBgKFgBADQ0PBhpSERYMQwdIFQwTEVQcHQYAGAcKSwMWDUkFBAxOU05SSu7KSUZeXFAADQYYRR9PDhhECRlOBEFKaEEeEBFBDAEHHRtFRQ1PFExCT11bVlRADa7GVRMOVCENQQUAFU9DRUEXC1USTBwKBQBEGEUJQRFbTRFSS+7KRQccUiFkKUE='),
    Question('A 12-layer MLP trained with Adam at batch 256: which saves more memory, mixed precision (bf16) or recomputation with √12 ≈ 3 segments?',
             choices=('bf16: about half the activations, a little more than recomputation saves', 'recomputation: about three quarters of the activations', 'they save exactly the same', 'neither saves anything'),
             salt='memory:3', answer='9a0d4962a619c883a3e7a7b0fb507258fb4e408c058722cf436d7427688054ea',
             why='KQ0USAhMEkhFFxsKSQ0LRi4WBE1ZHAFJAANPAAEBHF5MU0IRAEZSUgBTV0ZSUlQWWQ0MVAkcTxsBFkxdDRMDV0UAFwsAShEOClIDUEpdVU0NHBsOFkQPQhwYQlBPHRwKABYNA08fCk0cAQFTRUNPChdECl1fU0J7RBUfWUQNABVVUgdGSFlVTwIDFksMBQBbCRJCTkgRUhhDFgwQDgYMTxccVcLs+08DBQgKDQMHQk5IER9ZUwMTAwtcRXIcDBpNHBobChANA0NMFgtOSFQZWR1CVkYcFwJNHAEBU0wACUtQRABMFQQQSQAfFxxQEUUSBxdFE1kcEEcBCgEfRA0CXRkVERpBGhZVAAYQFAYcAgAbDhZLGw4dD0hEA0MJQRFfRxkXF1RFFkZbUglBAAoHU0wMAAYUERhICEEDXUEdHEMAAwcJGgZFF1kAEwBdXU8HBR0JXx9GQltDABsPQRYMCQEBSQBMQEQSTI3m40RQXA1JQRFbVhEWWQigwlVVUgRCFhoBAF6N5/EKRANLTA9CVkENFwtTQgQSTxlFHVmN/boCQ08cDA0PRUwDB1tUB1IRQQ4TDwEVRU8XAwwAHA4cH0QKTBBMUFQaTBULHFIRTEhPJgpHHBsdRR5PGwMBHUxGCQQSGkEWHQxUQlJJXUZL'),
    Question('Adam in mixed precision (bf16 parameters and gradients, an fp32 master copy and two fp32 moments): how many bytes per parameter, activations aside?',
             number='H0YaD1ZBUwwMVFANAlhFVkFCVF0=',
             unit='bytes',
             why='VkRETwpQVBpQFQAYTQcRAx1bRQtZXVUIDgleXUQDHkwICAdUVF1SUgBWRU4JAlYSWQIUUxgKHUJET0wZTEpCDgBcBhFFQhERAFIITxQKG1QfRk9WRFVaDQ4YFl9TWFIjRTAqQRxSLgBET0QSTAkAGUQQBEhMDhJOSRkbA0UQRRUbExFFWUcnQQYNBwoKAA1fBUEHTgAVHlcAUFVUX15F4t5cWxFFQQ=='),
    Question('In fp16 without loss scaling, what becomes of a gradient value of 10⁻⁸?',
             choices=('it is stored exactly', 'it rounds to 0 (underflow)', 'it becomes inf (overflow)', 'it is stored as 6·10⁻⁸'),
             salt='memory:5', answer='b8d5b1be1686234a5dc24cec5b97f241b5d61bbfb3b3bd2be70ca8ea88700ad4',
             why='AhRdG0sSQklNFR4VRRERRh8dFkkNBgNFTBkOBxEBTEQfQVDYoc+wy8Lj0UaN++0AT63CEVyN7tCG5dQWTFBS2KHPkPiYQgwVTx4AUwpPAUgNAU8DBQgKDQMHQlNUWFIKT0IMEk8AClUXCwYAGABPW0pEIVgAFQtKTA0bF0dCEQ4KUglPChxVQhVPXandhu2bTAMHXE8GF1lCAwYNGBMXRFlHMlINCzwIBQgJX0VBD1VWEQFZUxcGDk8VF0EdBhBOGBxPAgoQAw0eAAxdRU9SHUkUDAIGHAIAGxZVSRhPDQ4CCx5ITBUKXwAHBhxQQhAICx0AU1kbHUVMHAwKCA0CSkI='),
    Question('Chen et al. (2016): how many segments should a chain of 64 layers be cut into so that the activations kept grow as √n?',
             number='H0YaD1ZBWhYAVgZbGkJVSF9DGA==',
             why='huz2G1hBXxoYVAEcRw8ACBsBRU8fT00AAA4WDhYXVg1UQRFfRxkXF1RCDAgfBxFTWQQQUBhPCx4WDQJKTBUKXwASHQtXAxcCQ1IVTAwcVU8CCk8YAQMBSAIVRUkATFIVQRsAFBxSF0UaABhQGRsKD0QFGA0NQRZTTRFSEE5CBwcMGRJBCwtVwuz7TwoGCxlZTFOAsroaUhVBGwAUHFVFQRobHFYNGwYEChdMRAISFl9BEFIWRkJTUkNSA08LTxpOCU8KExAWDQ0KDhBNQQYWVw=='),
]
