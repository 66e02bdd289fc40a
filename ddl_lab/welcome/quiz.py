"""Lesson 00 (welcome): the self-check quiz (``quiz(load_quiz("welcome"))``).

Answers and explanations are sealed (``ddl_lab.active.seal_choice`` /
``seal_number`` / ``seal_text``) so that they are not read at a glance; to change one,
seal the new text with those functions. Salt: ``"<slug>:<question number>"``.
"""
from ddl_lab.active import Question

QUESTIONS = [
    Question('Four ranks each hold a tensor with their rank (0, 1, 2, 3) and call dist.all_reduce(t) with the default op. What does rank 2 hold afterwards?',
             number='H0YaD1ZBVBYAVgZbGkJVSF9DGA==',
             why='BQgAch4EBk9DEVILRRIJBwwXFgANBxAAGAoBGAsWTEICQSdsZSYrWVIDCw1PEBwADQcQAB8aAksLEglfTAAOVgAGExdLEV9GX1lUC0tERgBRT1lF'),
    Question('Four worker processes, one intra-op thread each, run busy loops on a 2-core laptop. What happens?',
             choices=('Each gets a core of its own: no oversubscription', 'They are 2× oversubscribed: each runs about half the time', 'Only two of them start; the others wait for a free core', 'They are 8× oversubscribed'),
             salt='welcome:2', answer='b5351485cb90b844756ea8c18af00f86da553fbcc9f764f481d7b8415115c5f3',
             why='IgsZX0wSC1RHGBdUVAoXAw4WAERZHwdPDwocGAEXTEICQRZNT1QRFlIHFkYOAAAAS6ziAAMZChkXEQ5eDxMLWEUQSVlPDABGGxoXRRgLVUUNDAdLCwoAVEwSFlVQB1IQVEIDFAAfRUccGwFJAghPHAsWH0hMSQRVVQZSDk8QDgMdAUXj7k8GRRoKHQoIRBhFHgQDXlNUFxhDCkxI'),
    Question('Rank 2 raises an exception while ranks 0, 1 and 3 wait for it in an all_reduce. What does Cluster.run do?',
             choices=('Hangs until you restart the kernel', 'Returns None for rank 2 and the sum of the others', 'Raises a WorkerError naming rank 2 and its exception', 'Retries rank 2 silently'),
             salt='welcome:3', answer='a863ae3711daf3e4cf42f738ed023b6863d2cfdaa04b46074938be39187bc3dd',
             why='MAwJDQ8NF0lUEQBZUgcVCR0GFgANBxAACg4GBw0KCw0eAAxRBwdSHFgBABYbGwpOWQ4GAA1POAQWDwlfKRMQVVJUGxdTFgAHC1IKRlkDEFQYBgEMRBAESEwOFlJFBgFZVwMMEk8UClIcGRBSV08KHQEWFQ0bAAtOABwTCgADRRIGHwBPDBtb'),
    Question('The π estimate combines the hits of all ranks. With 4× as many darts in total, its typical error is about …',
             choices=('4× smaller', '2× smaller', 'the same', '16× smaller'),
             salt='welcome:4', answer='edbb207c4748e422de74f990e7355f610228aebeeb8ca17a672fe74c3397bb65',
             why='JUQhQgIVBxpjFQAVT0IAFRsbCEENClJTTAodGQsWTF4EEwtUSwdSFUkJAEZeXYeo40cbVQENChlECwoNCAAQTlNdSFkUofJGGxoAAB0OB1QfTwcKCBIJDQUVTA=='),
    Question('Why do the worker functions read their rank from torch.distributed rather than taking it as an argument?',
             choices=('It is faster', 'So the same function runs unchanged under torchrun on a real cluster', 'Because pickling integers is not allowed', 'To avoid a deadlock'),
             salt='welcome:5', answer='0b2e46d1a3e1cf9d9dcc8a997930dd2ad8427bbd16c4400075fc3551deb0e364',
             why='EAseTgQTF1QABxcNU0IRDgpSF0EXBFVJAk8bAwFECUMaCBBVThkXF1RCBAgLUgZBFQMGABUAGhlEAhlDDxULVU5PUgtFAwEPARVFSQ1PE1IDAk8fCxYPRUIFC0lUBhsbVRYAAk8fBEscHFVUBApPBQsQCU8DDgkaQRoWWVQKAEYMHhBTDQoHAB4aAUsQDAkNHwAPXwAXHR1FTA=='),
]
