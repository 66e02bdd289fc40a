"""Lesson 08 (compression): the self-check quiz (``quiz(load_quiz("compression"))``).

Answers and explanations are sealed (``ddl_lab.active.seal_choice`` /
``seal_number`` / ``seal_text``) so that they are not read at a glance; to change one,
seal the new text with those functions. Salt: ``"<slug>:<question number>"``.
"""
from ddl_lab.active import Question

QUESTIONS = [
    Question("ID2223 review question 4 (Teta & Zangis): quantization, in their sense, means …",
             choices=('sending only the largest gradient entries', 'representing values with fewer bits — down to approximating a floating-point network by one with low bit-width numbers', 'compressing the data set', 'averaging models less often'),
             salt='compression:1', answer='192eadbaaa18b17b1a8ac4732920997e8ec18d333542b68e75f088ed85580198',
             why='NRENQxgIGFtUHR0XABAAAhoRAFNZGx1FTA0GHxdEHEgeQQxPTRYXCwBKAxZeREkASEIXSRhDTzo3IygKH0EOX1YRHgoJWUUKAAVFQhAbWFcFCxsDRAoJWRsOEFFTVAMMQQwRDxUXRVQRClVXCQYIAxAXTEwCBUJbQwAbD0EWDAkBAUVUEQoYUwkDGQ4XSExeDRcLVEdUHxxNDRcfTxMLRFkMGk0cGhsORAUYDR8OD18AFREaVRAEBRZc'),
    Question('ID2223 review question 4 (Teta & Zangis): gradient sparsification means …',
             choices=('sending fewer elements — only the significant entries (with a residual for the rest)', 'sending every element in 16 bits', "pruning the network's neurons", 'averaging the gradients less often'),
             salt='compression:2', answer='50e772921e5b079781ccb2d2d62639a12cc7cd119edab871a2f37c0f49a77026',
             why='NxAeQgFGERpUHAAcUwoKCgtSBE4dTwFPHEIESxcBAklMAEJJTRUeFQARABJPHQMAUQYbRAkXQ0sSBQBYCUENSAAHGx5OS0UWDhsXU0JPEFIeAB1LAgEJSQ4AAVEAHxccUBFFEQcTEQAODgYAAgAbSxcBAllMBw1IABgTDUUQRRUbFxVTVw=='),
    Question('A model of 1,000,000 parameters: how many MB is one fp16 update?',
             number='H0YaD1ZBUBYAVgZbGkJVSF9HGA==',
             unit='MB',
             why='VVJMTwUVERodVEBZQhsRAxxSFUULTwVBHg4CDhABHhdMU0J3YlhSHFgDBhIDC0VIGAMTAAMJTw0UV14KH0FWGm02XA=='),
    Question('1-bit SGD with one 32-bit scale per bucket of 1024 entries: about how many times smaller than fp32?',
             number='H0YaD1ZBUQsMVFANAlhFV0FHGA==',
             why='V1ZMTwUVERrC8uBZEUIHDxtSTgBKXVoRXF1bSwYNGF5Mg+uyAEVcSRNCBw8bAUVQHB1VRQIbHRJeRA1PAxQWGhNFse4AEQgHAx4AUlc='),
    Question("At a well-chosen τ, why does Strom's threshold learn about as well as fp32 although it holds back most entries at every step?",
             choices=('The dropped entries are zero anyway', 'The residual keeps every unsent amount and adds it to the next gradient', 'The workers send the dropped entries at the end', 'Adagrad on the server'),
             salt='compression:5', answer='767a8c77a8d1bf3c530a5151c472ccd882ffd589f9e0e4b4577822d79e716905',
             why='IRYeQh5BBF9FEBAYQwlfRgEdEUgQARIABRxPBwsXGAFMDgxWWVQWHEwDHAMLUoeg7U8CSAUMB0sNF0xMABINGlccC1lFAxcKFlIRUhgGG0kCCE8HBQMfAw=='),
]
