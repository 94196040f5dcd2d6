"""Fixed texts for reference comparisons (written for these tests; plain English prose, ~280 SmolLM2 tokens)."""

LIGHTHOUSE = (
    "The old lighthouse stood at the end of a narrow stone path, and for more than a hundred years it had "
    "guided fishing boats safely back to the harbor. Every evening the keeper climbed the spiral staircase, "
    "cleaned the great glass lens, and lit the lamp before the sun went down. In the winter, when storms "
    "rolled in from the north, he stayed awake through the night, watching the beam sweep across the dark "
    "water and listening to the waves break against the rocks below.\n\n"
    "When the town council decided to replace the lamp with an automatic light, many people were sad. "
    "The keeper had become part of the town's history, and children often visited him to hear stories "
    "about shipwrecks, sea birds, and the strange lights that sailors claimed to have seen on foggy nights. "
    "On his last day, the whole town gathered on the beach to thank him. The mayor gave a short speech, "
    "a band played a few songs, and the keeper's granddaughter read a poem she had written for him.\n\n"
    "Today the lighthouse is a small museum. Visitors can walk up the same staircase, look through the "
    "keeper's logbooks, and see the brass tools he used to repair the lamp. A photograph on the wall shows "
    "him standing proudly beside the lens, and a note beneath it explains how the light worked. Most "
    "visitors leave with the same thought: the sea is calmer when someone is watching over it.\n"
)

# SmolLM2's ChatML prompt (its template's default system message) for one question.
CHAT_PROMPT = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
)

# Short texts of different kinds for tokenizer comparisons.
VARIED = [
    "Hello world",
    "def f(x):\n    return x ** 2  # square\n\n\tif x>=10: print('big')",
    "Numbers 1234567 and 3.14159, dates 2026-12-02, phone +1 (555) 010-9999.",
    "Ünïcödé: naïve café, Straße, ça va? Привет, мир! 日本語のテキスト。 مرحبا",
    "Emoji 🙂🚀👍🏽 and symbols © ® ™ → ∞",
    "   leading spaces,\ttabs\t\tand   runs   of    whitespace\n\n\n  ",
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
]
