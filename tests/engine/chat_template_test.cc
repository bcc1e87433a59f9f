#include "lattice/engine/tokenizer/chat_template.h"

#include <gtest/gtest.h>

namespace lattice::engine {
namespace {

const std::vector<ChatMessage> kChat = {
    {"system", "You are helpful."},
    {"user", "Hi"},
    {"assistant", " Hello! "},
    {"user", "How are you?"},
};

std::string render(ChatFormat f, bool gen = true) { return *render_chat(f, kChat, gen); }

TEST(ChatTemplate, ChatML) {
  EXPECT_EQ(render(ChatFormat::kChatML),
            "<|im_start|>system\nYou are helpful.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n Hello! <|im_end|>\n"
            "<|im_start|>user\nHow are you?<|im_end|>\n"
            "<|im_start|>assistant\n");
  const std::string no_prompt = render(ChatFormat::kChatML, false);
  EXPECT_EQ(no_prompt.substr(no_prompt.size() - 23), "How are you?<|im_end|>\n");
}

TEST(ChatTemplate, Llama3TrimsContent) {
  EXPECT_EQ(render(ChatFormat::kLlama3),
            "<|start_header_id|>system<|end_header_id|>\n\nYou are helpful.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHow are you?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, Llama2Variants) {
  EXPECT_EQ(render(ChatFormat::kLlama2Sys),
            "[INST] <<SYS>>\nYou are helpful.\n<</SYS>>\n\nHi [/INST] Hello! </s>[INST] How are you? [/INST]");
  EXPECT_EQ(render(ChatFormat::kLlama2),
            "[INST] You are helpful.\nHi [/INST] Hello! </s>[INST] How are you? [/INST]");
  EXPECT_EQ(render(ChatFormat::kLlama2SysBos),
            "[INST] <<SYS>>\nYou are helpful.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] How are you? [/INST]");
  EXPECT_EQ(render(ChatFormat::kLlama2SysStrip),
            "[INST] <<SYS>>\nYou are helpful.\n<</SYS>>\n\nHi [/INST]Hello!</s>[INST] How are you? [/INST]");
}

TEST(ChatTemplate, Mistral) {
  EXPECT_EQ(render(ChatFormat::kMistralV1),
            " [INST] You are helpful.\n\nHi [/INST]  Hello! </s> [INST] How are you? [/INST]");
  EXPECT_EQ(render(ChatFormat::kMistralV3),
            "[INST] You are helpful.\n\nHi[/INST] Hello!</s>[INST] How are you?[/INST]");
  EXPECT_EQ(render(ChatFormat::kMistralV3Tekken),
            "[INST]You are helpful.\n\nHi[/INST] Hello! </s>[INST]How are you?[/INST]");
  EXPECT_EQ(render(ChatFormat::kMistralV7),
            "[SYSTEM_PROMPT] You are helpful.[/SYSTEM_PROMPT][INST] Hi[/INST]  Hello! </s>[INST] How are you?[/INST]");
}

TEST(ChatTemplate, GemmaAndPhi3) {
  EXPECT_EQ(render(ChatFormat::kGemma),
            "<start_of_turn>user\nYou are helpful.\n\nHi<end_of_turn>\n"
            "<start_of_turn>model\nHello!<end_of_turn>\n"
            "<start_of_turn>user\nHow are you?<end_of_turn>\n"
            "<start_of_turn>model\n");
  EXPECT_EQ(render(ChatFormat::kPhi3),
            "<|system|>\nYou are helpful.<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\n Hello! <|end|>\n"
            "<|user|>\nHow are you?<|end|>\n<|assistant|>\n");
}

TEST(ChatTemplate, DetectsFormatsFromTemplateSource) {
  // Fragments of the real templates' Jinja source.
  EXPECT_EQ(detect_chat_format("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                               "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"),
            ChatFormat::kChatML);
  EXPECT_EQ(detect_chat_format("{% set content = '<|start_header_id|>' + message['role'] + "
                               "'<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}"),
            ChatFormat::kLlama3);
  EXPECT_EQ(detect_chat_format("{{ bos_token + '[INST] ' + '<<SYS>>\\n' + system_message }}"),
            ChatFormat::kLlama2SysBos);
  EXPECT_EQ(detect_chat_format("[INST] <<SYS>>"), ChatFormat::kLlama2Sys);
  EXPECT_EQ(detect_chat_format("{{ '[INST] ' + message['content'] + ' [/INST]' }}"), ChatFormat::kLlama2);
  EXPECT_EQ(detect_chat_format("{{ '[SYSTEM_PROMPT]' }}[INST]"), ChatFormat::kMistralV7);
  EXPECT_EQ(detect_chat_format("{{'<start_of_turn>' + role + '\\n'}}"), ChatFormat::kGemma);
  EXPECT_EQ(detect_chat_format("<|user|>\n{{ c }}<|end|>\n<|assistant|>\n"), ChatFormat::kPhi3);
  EXPECT_EQ(detect_chat_format("llama3"), ChatFormat::kLlama3);
  EXPECT_EQ(detect_chat_format("mistral-v3-tekken"), ChatFormat::kMistralV3Tekken);
  EXPECT_EQ(detect_chat_format("{{ something else }}"), ChatFormat::kUnknown);
  EXPECT_EQ(chat_format_name(ChatFormat::kChatML), "chatml");
}

TEST(ChatTemplate, UnknownFallsBackToChatML) {
  bool fell_back = false;
  const std::vector<ChatMessage> chat = {{"user", "Hi"}};
  EXPECT_EQ(apply_chat_template("{{ unknown }}", chat, true, &fell_back), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_TRUE(fell_back);
  EXPECT_EQ(apply_chat_template("llama3", chat, false, &fell_back),
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
  EXPECT_FALSE(fell_back);
  EXPECT_EQ(render_chat(ChatFormat::kUnknown, chat, true).status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace lattice::engine
