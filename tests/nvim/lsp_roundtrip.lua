-- Neovim (0.7.x, headless) as a client of leir-lsp: open a file, wait for
-- its diagnostics, hover, list the code actions at a position, resolve the
-- first and apply its edit, write the file. What happened goes to a JSON file
-- for tests/test_neovim.py to check; Neovim exits 0 when every request was
-- answered, 1 otherwise.
--
--   LEIR_LSP_CMD   the server command, a JSON list
--   LEIR_FILE      the file to open (it is overwritten by the applied edit)
--   LEIR_FILETYPE  its filetype (default leir; python for a TVMScript file)
--   LEIR_LINE, LEIR_CHARACTER   the LSP position (0-based) to hover and ask at
--   LEIR_OUT       where to write the JSON record
--   LEIR_TIMEOUT_MS  per request (default 60000: the first code action may
--                    load TVM to verify the step)
--
-- Run: nvim --headless -u NONE -c 'luafile tests/nvim/lsp_roundtrip.lua'

local timeout = tonumber(os.getenv('LEIR_TIMEOUT_MS') or '60000')
local record = { log = {} }

local function note(message)
  table.insert(record.log, message)
end

local function finish(ok)
  record.ok = ok
  local out = assert(io.open(os.getenv('LEIR_OUT'), 'w'))
  out:write(vim.fn.json_encode(record))
  out:close()
  vim.cmd(ok and 'qall!' or 'cquit! 1')
end

-- Answers of a buf_request_sync / request_sync call: the one client's result,
-- or an error naming what failed.
local function only_result(method, responses, err)
  if responses == nil then
    error(method .. ': no answer within ' .. timeout .. ' ms' .. (err and (' (' .. tostring(err) .. ')') or ''))
  end
  for _, response in pairs(responses) do
    if response.err then
      error(method .. ': ' .. vim.inspect(response.err))
    end
    return response.result
  end
  error(method .. ': no client answered')
end

local function main()
  local cmd = vim.fn.json_decode(os.getenv('LEIR_LSP_CMD'))
  local file = os.getenv('LEIR_FILE')
  local position = { line = tonumber(os.getenv('LEIR_LINE')), character = tonumber(os.getenv('LEIR_CHARACTER')) }

  vim.cmd('edit ' .. vim.fn.fnameescape(file))
  local bufnr = vim.api.nvim_get_current_buf()
  -- Neovim knows no .leir filetype; the server takes the language from it.
  vim.bo[bufnr].filetype = os.getenv('LEIR_FILETYPE') or 'leir'
  local uri = vim.uri_from_bufnr(bufnr)

  local diagnostics = nil
  local client_id = vim.lsp.start_client({
    name = 'leir-lsp',
    cmd = cmd,
    root_dir = vim.fn.fnamemodify(file, ':h'),
    settings = { leir = { autoMeasure = false } },
    handlers = {
      ['textDocument/publishDiagnostics'] = function(_, result)
        if result and result.uri == uri then
          diagnostics = result.diagnostics
        end
      end,
    },
    on_exit = function(code, signal)
      note('server exited with code ' .. tostring(code) .. ', signal ' .. tostring(signal))
    end,
  })
  if client_id == nil then
    error('vim.lsp.start_client did not start ' .. vim.inspect(cmd))
  end
  vim.lsp.buf_attach_client(bufnr, client_id)
  local client = vim.lsp.get_client_by_id(client_id)

  if not vim.wait(timeout, function() return client.initialized end, 20) then
    error('initialize: no answer within ' .. timeout .. ' ms')
  end
  record.offset_encoding = client.offset_encoding

  if not vim.wait(timeout, function() return diagnostics ~= nil end, 20) then
    error('textDocument/publishDiagnostics: none for ' .. uri .. ' within ' .. timeout .. ' ms')
  end
  record.diagnostics = diagnostics

  local text_document = { uri = uri }
  local hover_responses, hover_err = vim.lsp.buf_request_sync(bufnr, 'textDocument/hover',
    { textDocument = text_document, position = position }, timeout)
  record.hover = only_result('textDocument/hover', hover_responses, hover_err)

  local action_responses, action_err = vim.lsp.buf_request_sync(bufnr, 'textDocument/codeAction', {
    textDocument = text_document,
    range = { start = position, ['end'] = position },
    context = { diagnostics = {} },
  }, timeout)
  local actions = only_result('textDocument/codeAction', action_responses, action_err) or {}
  record.actions = actions
  if #actions == 0 then
    error('textDocument/codeAction: no action at ' .. vim.inspect(position))
  end

  local resolved_response, resolve_err = client.request_sync('codeAction/resolve', actions[1], timeout, bufnr)
  if resolved_response == nil then
    error('codeAction/resolve: no answer within ' .. timeout .. ' ms (' .. tostring(resolve_err) .. ')')
  end
  if resolved_response.err then
    error('codeAction/resolve: ' .. vim.inspect(resolved_response.err))
  end
  local resolved = resolved_response.result
  record.resolved = resolved
  if resolved == nil or resolved.edit == nil then
    error('codeAction/resolve: no edit in ' .. vim.inspect(resolved))
  end
  vim.lsp.util.apply_workspace_edit(resolved.edit, client.offset_encoding)
  vim.cmd('write')
  record.written = true

  client.stop()
  vim.wait(5000, function() return client.is_stopped() end, 20)
end

local ok, err = xpcall(main, debug.traceback)
if not ok then
  record.error = tostring(err)
end
finish(ok)
