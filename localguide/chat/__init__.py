"""Conversations: the chat run (messages checked, the template rendered, the answer split into
reasoning, content and tool calls), chat templates, tool-call formats and partial JSON."""
